// GPT model description (model_desc.h). FLOPs from PTD-P (notes-dissertation §2.6); activation
// sizes per ActLayout; tensor-parallel all-reduces as in Megatron (two per layer forward — after
// attention and after the MLP — and two in backward, notes-dissertation §2.2).
#include <cmath>

#include "core/error.h"
#include "plan/model_desc.h"

namespace baton::plan {

ModelDesc gpt_desc(const GptShape& g, const GptOptions& o) {
  BATON_REQUIRE(g.vocab > 0 && g.n_layer > 0 && g.d_model > 0 && g.seq_len > 0 && g.n_head > 0,
                "GPT shape needs positive n_layer, d_model, seq_len, n_head and vocab",
                "set model.vocab_size in the config (the planner has no tokenizer)");
  BATON_REQUIRE(o.recompute == "none" || o.recompute == "selective" || o.recompute == "full",
                fmt::format("unknown recompute '{}'", o.recompute), "use none, selective or full");
  const double b = o.micro_batch, s = g.seq_len, h = g.d_model, a = g.n_head, V = g.vocab,
               t = o.tp;
  const bool mega = o.layout == ActLayout::MEGATRON;
  const double eb = mega ? 2 : 4;  // bytes per activation element
  const double sbh = s * b * h;
  const bool sp = o.sequence_parallel && t > 1;
  const double tp_ar = t > 1 ? sbh * eb : 0;  // one all-reduce of the [s,b,h] activation

  ModelDesc m;
  m.name = fmt::format("gpt-{}l-{}h", g.n_layer, g.d_model);
  m.micro_batch = o.micro_batch;
  m.tokens_per_sample = s;
  m.input_bytes = s * b * 4;  // token ids

  // Embedding (vocab-parallel: one all-reduce forward). Saves nothing but the token ids.
  LayerDesc emb;
  emb.name = "embedding";
  emb.params = V * h / t + s * h;
  emb.out_bytes = (sp ? sbh / t : sbh) * eb;
  emb.stash_bytes = mega ? s * b * 4 : (sp ? sbh / t : sbh) * eb;
  emb.work_bytes = mega ? 0 : sbh * 4;
  emb.fwd_mem_bytes = 2 * emb.out_bytes;
  emb.bwd_mem_bytes = 2 * emb.out_bytes;
  emb.tp_fwd_bytes = tp_ar;
  m.layers.push_back(emb);

  // Transformer block.
  const double fwd = (24 * b * s * h * h + 4 * b * s * s * h) / t;
  const double attn_core = 4 * b * s * s * h / t;  // QK^T and attention·V: what selective recomputes
  double stash_full;  // everything a non-recomputing block keeps
  if (mega) {
    stash_full = sp ? sbh * (34 / t + 5 * a * s / (h * t)) : sbh * (10 + 24 / t + 5 * a * s / (h * t));
  } else {
    // model/transformer_block.cpp saved_bytes (fp32): Nl·C·4 + Nl·4 + (sp: 2NC) + N·3Cl + N·Cl
    // + B·NHl·T² + N·8Cl floats, N = B·T tokens, Nl = N/t with sequence parallelism (plus up to
    // 64 bytes of alignment per view).
    const double N = b * s, Nl = sp ? N / t : N, Cl = h / t;
    stash_full = 4 * (Nl * h * 4 + Nl * 4 + (sp ? 2 * N * h : 0) + N * 3 * Cl + N * Cl +
                      b * (a / t) * s * s + N * 8 * Cl);
  }
  LayerDesc blk;
  blk.params = (12 * h * h) / t + 13 * h;  // QKV, proj, fc, fc-proj (+ biases and LN ≈ 13h)
  blk.out_bytes = (sp ? sbh / t : sbh) * eb;
  blk.fwd_flops = fwd;
  blk.bwd_flops = 2 * fwd;
  blk.fwd_mem_bytes = 2 * stash_full;  // each stashed byte written once and read once
  blk.bwd_mem_bytes = 2 * blk.fwd_mem_bytes;
  blk.tp_fwd_bytes = 2 * tp_ar;
  blk.tp_bwd_bytes = 2 * tp_ar;
  if (mega) {
    blk.work_bytes = 0;
  } else {
    // transformer_block.cpp workspace_bytes (fp32): 2·Nl·C + 2·N·C + N·4·C/t floats.
    const double N = b * s, Nl = sp ? N / t : N;
    blk.work_bytes = 4 * (2 * Nl * h + 2 * N * h + N * 4 * h / t);
  }
  if (o.recompute == "full") {
    // Only the layer input is kept; the forward reruns (with its all-reduces) before backward,
    // and its full activations exist transiently (notes-dissertation §2.4).
    blk.stash_bytes = blk.out_bytes;
    blk.work_bytes += stash_full;
    blk.bwd_flops += fwd;
    blk.bwd_mem_bytes += blk.fwd_mem_bytes;
    blk.tp_bwd_bytes += blk.tp_fwd_bytes;
  } else if (o.recompute == "selective") {
    // Recompute only the attention core (softmax, dropout, QK^T, ·V): drops the 5as²b part.
    const double attn_bytes = mega ? 5 * a * s * s * b / t : 4 * b * (a / t) * s * s;
    blk.stash_bytes = stash_full - attn_bytes;
    blk.work_bytes += attn_bytes;
    blk.bwd_flops += attn_core;
    blk.bwd_mem_bytes += attn_bytes;
  } else {
    blk.stash_bytes = stash_full;
  }
  for (int i = 0; i < g.n_layer; ++i) {
    blk.name = fmt::format("block{}", i);
    m.layers.push_back(blk);
  }

  // LM head: final layernorm + logits (tied to the embedding) + cross-entropy. Megatron keeps the
  // fp32 logits (4·s·b·V/t); baton keeps lm_head.cpp saved_bytes.
  LayerDesc head;
  head.name = "lm_head";
  head.params = V * h / t + 2 * h;
  head.tied_to = 0;
  head.out_bytes = s * b * 4;  // per-token losses
  head.fwd_flops = 2 * b * s * h * V / t;
  head.bwd_flops = 2 * head.fwd_flops;
  if (mega) {
    head.stash_bytes = (sp ? sbh / t : sbh) * eb + 4 * s * b * V / t;
  } else {
    const double N = b * s, Nl = sp ? N / t : N;
    head.stash_bytes = 4 * (Nl * h + 2 * Nl + (sp ? N * h : 0) + N * V / t + N);
    head.work_bytes = 4 * (N * h + Nl * h + 3 * N);
  }
  head.fwd_mem_bytes = 2 * head.stash_bytes;
  head.bwd_mem_bytes = 2 * head.stash_bytes;
  head.tp_bwd_bytes = tp_ar;
  m.layers.push_back(head);

  // What the trainer allocates (pipeline/stage_memory.h), from the sizes above: each layer's
  // parameters as one 16-float aligned run (the runtime aligns every tensor: a few floats more),
  // its input the previous layer's output; no non-trainable buffers, no metrics besides the loss.
  m.target_bytes = s * b * 4;  // the next token of every position
  double in = m.input_bytes;
  for (LayerDesc& l : m.layers) {
    l.param_floats = std::ceil(l.params / 16) * 16;
    l.in_bytes = in;
    in = l.out_bytes;
  }

  // Whole-model counts per sample (notes-dissertation §2.6 and Eq. 4.2).
  const double per_layer = 24 * s * h * h + 4 * s * s * h;
  m.model_flops_per_sample = 3 * (g.n_layer * per_layer + 2 * s * h * V);
  double recompute_extra = 0;
  if (o.recompute == "full") recompute_extra = g.n_layer * per_layer;
  if (o.recompute == "selective") recompute_extra = g.n_layer * 4 * s * s * h;
  m.hardware_flops_per_sample = m.model_flops_per_sample + recompute_extra;
  m.total_params = V * h + s * h + g.n_layer * (12 * h * h + 13 * h) + 2 * h;
  return m;
}

}  // namespace baton::plan
