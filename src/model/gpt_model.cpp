#include "model/gpt_model.h"

#include <algorithm>

#include "core/error.h"
#include "core/rng.h"
#include "model/embedding.h"
#include "model/lm_head.h"
#include "model/transformer_block.h"

namespace baton {

Recompute parse_recompute(const std::string& s) {
  if (s == "none") return Recompute::NONE;
  if (s == "selective") return Recompute::SELECTIVE;
  if (s == "full") return Recompute::FULL;
  throw Error(fmt::format("unknown recompute mode \"{}\"", s),
              "use parallel.recompute = \"none\", \"selective\" or \"full\"");
}

std::vector<LayerRange> pipeline_chunks(int n_layer, int pp, int vp, int pp_rank) {
  const int stages = pp * vp;
  BATON_REQUIRE(stages >= 1 && n_layer % stages == 0,
                fmt::format("model.n_layer = {} does not split evenly into parallel.pp × parallel.vp "
                            "= {} × {} = {} pipeline model stages", n_layer, pp, vp, stages),
                "Megatron's split gives every model stage the same number of transformer blocks: "
                "use an n_layer that is a multiple of pp × vp, or change pp / vp");
  BATON_ASSERT(pp_rank >= 0 && pp_rank < pp, "pipeline rank {} outside pp = {}", pp_rank, pp);
  const int k = n_layer / stages;
  std::vector<LayerRange> out;
  for (int c = 0; c < vp; ++c) {
    const int s = c * pp + pp_rank;  // PTD-P: chunk c of rank r is model stage c·pp + r
    LayerRange r{1 + s * k, 1 + (s + 1) * k};
    if (s == 0) r.begin = 0;                       // the embedding
    if (s == stages - 1) r.end = n_layer + 2;      // the head
    out.push_back(r);
  }
  return out;
}

GptModel::GptModel(const GptDims& dims, Backend& backend, TensorParallel tp, size_t flat_multiple,
                   std::vector<LayerRange> chunks, Recompute recompute)
    : dims_(dims), be_(backend), tp_(tp), chunks_(std::move(chunks)), recompute_(recompute) {
  tp_.act = be_.act_dtype();
  BATON_ASSERT(dims.d_model % dims.n_head == 0, "n_head must divide d_model");
  BATON_ASSERT(dims.n_head % tp.size == 0 && dims.vocab_padded % tp.size == 0,
               "tp={} must divide n_head={} and the padded vocabulary {}", tp.size, dims.n_head,
               dims.vocab_padded);
  BATON_ASSERT(!tp.active() || tp.comm != nullptr, "tensor parallelism without a communicator");
  const int global_layers = dims.n_layer + 2;
  if (chunks_.empty()) chunks_.push_back({0, global_layers});
  int prev_end = 0;
  for (const LayerRange& c : chunks_) {
    BATON_ASSERT(c.begin >= prev_end && c.begin < c.end && c.end <= global_layers,
                 "bad model chunk [{}, {}) of {} global layers", c.begin, c.end, global_layers);
    prev_end = c.end;
    chunk_first_.push_back(static_cast<int>(layers_.size()));
    for (int g = c.begin; g < c.end; ++g) {
      if (g == 0) {
        layers_.push_back(std::make_unique<Embedding>(dims, tp_, be_));
      } else if (g == global_layers - 1) {
        layers_.push_back(std::make_unique<LmHead>(dims, tp_, be_));
      } else {
        layers_.push_back(std::make_unique<TransformerBlock>(dims, g - 1, tp_, be_,
                                                             recompute == Recompute::SELECTIVE));
      }
      is_block_.push_back(g > 0 && g < global_layers - 1);
    }
  }
  chunk_first_.push_back(static_cast<int>(layers_.size()));
  for (int l = 0; l < num_layers(); ++l) {
    layers_[l]->add_params(table_);
    layer_of_param_.resize(table_.size(), l);
  }
  flat_size_ = (table_.total() + flat_multiple - 1) / flat_multiple * flat_multiple;
  params_ = static_cast<float*>(be_.alloc(flat_size_ * sizeof(float)));
  grads_ = static_cast<float*>(be_.alloc(flat_size_ * sizeof(float)));
  compute_params_ = be_.act_dtype() == DType::F32 ? params_ : be_.alloc(flat_size_ * be_.act_size());
  loss_acc_ = static_cast<double*>(be_.alloc(sizeof(double)));
}

void GptModel::refresh_compute_params() {
  if (compute_params_ != params_)
    be_.cast(compute_params_, be_.act_dtype(), params_, DType::F32, flat_size_);
}

GptModel::~GptModel() {
  free_activations();
  if (compute_params_ != params_) be_.release(compute_params_);
  be_.release(params_);
  be_.release(grads_);
  be_.release(loss_acc_);
}

int GptModel::tied_wte_param() const {
  if (has_embedding() == has_head()) return -1;  // both (one table entry) or neither
  return table_.find("wte");
}

void GptModel::free_activations() {
  for (Slot& s : slots_) {
    be_.release(s.saved);
    be_.release(s.input);
    be_.release(s.dout);
    be_.release(s.din);
    be_.release(s.deferred);
    be_.release(s.tokens);
    be_.release(s.targets);
  }
  slots_.clear();
  be_.release(workspace_);
  be_.release(recompute_buf_);
  be_.release(dbuf_[0]);
  be_.release(dbuf_[1]);
  workspace_ = recompute_buf_ = dbuf_[0] = dbuf_[1] = nullptr;
  act_bytes_ = 0;
}

void GptModel::init_weights(uint64_t seed) {
  std::vector<float> host(table_.total(), 0.0f), full;
  for (int i = 0; i < table_.size(); ++i) {
    const ParamSpec& spec = table_.spec(i);
    float* p = table_.at(host.data(), i);
    const size_t n = table_.numel(i);
    switch (spec.init) {
      case ParamSpec::Init::ZEROS: std::fill(p, p + n, 0.0f); break;
      case ParamSpec::Init::ONES: std::fill(p, p + n, 1.0f); break;
      case ParamSpec::Init::NORMAL: {
        // Draw the full logical tensor and keep this rank's shard: every layout starts from the
        // single-process model's weights (and both pipeline copies of wte are equal).
        full.resize(n * (spec.tp_dim >= 0 ? tp_.size : 1));
        Rng rng(mix({seed, hash_string(spec.name)}));
        for (float& x : full) x = spec.init_std * rng.normal();
        extract_shard(spec, tp_.rank, tp_.size, full.data(), p);
        break;
      }
    }
  }
  be_.to_device(params_, host.data(), host.size() * sizeof(float));
  refresh_compute_params();
}

void GptModel::zero_grads() { be_.zero(grads_, flat_size_); }

void GptModel::reduce_sequence_parallel_grads(int layer) {
  if (!tp_.sp()) return;
  for (int i = 0; i < table_.size(); ++i)
    if (table_.spec(i).sp_partial && layer_of_param_[i] == layer)
      tp_.all_reduce_sum(table_.at(grads_, i), table_.numel(i));
}

double GptModel::grad_sumsq_share() {
  double s = 0;
  for (int i = 0; i < table_.size(); ++i)
    if (table_.spec(i).tp_dim >= 0 || tp_.rank == 0)
      s += be_.sum_squares(table_.at(grads_, i), table_.numel(i));
  return s;
}

bool GptModel::recomputes(int layer) const { return recompute_ == Recompute::FULL && is_block_[layer]; }

size_t GptModel::boundary_count(int B, int T) const {
  return size_t(tp_.local_rows(B * T)) * dims_.d_model;
}

void GptModel::reserve(int B, int T, int slots, bool split_backward) {
  BATON_ASSERT(T <= dims_.seq_len, "sequence of {} tokens exceeds seq_len {}", T, dims_.seq_len);
  if (B <= cap_B_ && T <= cap_T_ && slots <= static_cast<int>(slots_.size()) &&
      (!split_backward || split_))
    return;
  split_ = split_ || split_backward;
  B = std::max(B, cap_B_);
  T = std::max(T, cap_T_);
  slots = std::max(slots, static_cast<int>(slots_.size()));
  free_activations();
  layer_offsets_.assign(layers_.size(), 0);
  deferred_offsets_.assign(layers_.size(), 0);
  // A slot holds one chunk's activations: offsets restart at each chunk, the slot is as large as
  // the largest chunk.
  size_t per_slot = 0, ws = 0, io = 0, rec = 0, per_slot_deferred = 0;
  for (int c = 0; c < num_chunks(); ++c) {
    size_t used = 0, deferred = 0;
    for (int l = chunk_first_[c]; l < chunk_first_[c + 1]; ++l) {
      const Layer& layer = *layers_[l];
      layer_offsets_[l] = used;
      const size_t keep = recomputes(l) ? layer.output_bytes(B, T) : layer.saved_bytes(B, T);
      used += (keep + 255) / 256 * 256;
      deferred_offsets_[l] = deferred;
      if (split_ && !recomputes(l)) deferred += (layer.deferred_bytes(B, T) + 255) / 256 * 256;
      per_slot_deferred = std::max(per_slot_deferred, deferred);
      ws = std::max(ws, layer.workspace_bytes(B, T));
      io = std::max(io, layer.output_bytes(B, T));
      if (recomputes(l)) rec = std::max(rec, layer.saved_bytes(B, T));
    }
    per_slot = std::max(per_slot, used);
  }
  const size_t boundary = is_whole_model() ? 0 : boundary_count(B, T) * be_.act_size();
  auto alloc = [&](size_t bytes) { return bytes ? static_cast<char*>(be_.alloc(bytes)) : nullptr; };
  for (int i = 0; i < slots; ++i) {
    Slot s;
    s.saved = alloc(per_slot);
    s.input = alloc(boundary);
    s.dout = alloc(boundary);
    s.din = alloc(boundary);
    s.deferred = alloc(per_slot_deferred);
    s.tokens = static_cast<int32_t*>(be_.alloc(size_t(B) * T * sizeof(int32_t)));
    s.targets = static_cast<int32_t*>(be_.alloc(size_t(B) * T * sizeof(int32_t)));
    slots_.push_back(s);
  }
  workspace_ = alloc(std::max<size_t>(ws, 1));
  recompute_buf_ = alloc(rec);
  dbuf_[0] = alloc(io);
  dbuf_[1] = alloc(io);
  act_bytes_ = (per_slot + per_slot_deferred + 3 * boundary) * slots + ws + rec + 2 * io;
  cap_B_ = B;
  cap_T_ = T;
}

void* GptModel::layer_saved(const Slot& s, int layer) const { return s.saved + layer_offsets_[layer]; }

void* GptModel::layer_out(const Slot& s, int layer) const {
  void* saved = layer_saved(s, layer);
  return recomputes(layer) ? saved : layers_[layer]->output(saved, s.B, s.T);
}

LayerCtx GptModel::ctx_for(const Slot& s, bool training, float dloss) const {
  LayerCtx c;
  c.be = &be_;
  c.table = &table_;
  c.params = active_params_ ? static_cast<void*>(active_params_) : compute_params_;
  c.grads = grads_;
  c.workspace = workspace_;
  c.B = s.B;
  c.T = s.T;
  c.tokens = s.tokens;
  c.tokens_host = s.tokens_host.empty() ? nullptr : s.tokens_host.data();
  c.targets = s.has_targets ? s.targets : nullptr;
  c.training = training;
  c.dloss = dloss;
  return c;
}

void GptModel::set_batch(int slot, const int32_t* tokens, const int32_t* targets, int B, int T) {
  BATON_ASSERT(slot >= 0 && slot < static_cast<int>(slots_.size()), "slot {} not reserved", slot);
  BATON_ASSERT(B <= cap_B_ && T <= cap_T_, "micro-batch {}x{} exceeds reserved {}x{}", B, T, cap_B_, cap_T_);
  Slot& s = slots_[slot];
  s.B = B;
  s.T = T;
  s.has_targets = targets != nullptr;
  if (tokens) {
    be_.to_device(s.tokens, tokens, size_t(B) * T * sizeof(int32_t));
    s.tokens_host.assign(tokens, tokens + size_t(B) * T);
  }
  if (targets) be_.to_device(s.targets, targets, size_t(B) * T * sizeof(int32_t));
}

void* GptModel::chunk_output(int chunk, int slot) {
  return layer_out(slots_[slot], chunk_first_[chunk + 1] - 1);
}

void GptModel::forward_chunk(int chunk, int slot, bool training, float dloss) {
  BATON_ASSERT(chunk >= 0 && chunk < num_chunks(), "chunk {} of {}", chunk, num_chunks());
  Slot& s = slots_[slot];
  LayerCtx ctx = ctx_for(s, training, dloss);
  const int first = chunk_first_[chunk], last = chunk_first_[chunk + 1] - 1;
  const void* in = chunks_[chunk].begin == 0 ? nullptr : s.input;
  for (int l = first; l <= last; ++l) {
    void* saved = layer_saved(s, l);
    if (recomputes(l)) {
      // Full recomputation: run in scratch, keep only the output (the next layer's input).
      layers_[l]->forward(ctx, in, recompute_buf_);
      be_.copy_bytes(saved, layers_[l]->output(recompute_buf_, s.B, s.T),
                     layers_[l]->output_bytes(s.B, s.T));
    } else {
      layers_[l]->forward(ctx, in, saved);
    }
    in = layer_out(s, l);
  }
  const bool head = chunks_[chunk].end == dims_.n_layer + 2;
  if (head && s.has_targets)
    be_.accumulate_sum(loss_acc_, static_cast<const float*>(in), size_t(s.B) * s.T);
}

double GptModel::take_loss_sum() {
  double sum = 0;
  be_.to_host(&sum, loss_acc_, sizeof(double));
  be_.zero_bytes(loss_acc_, sizeof(double));
  return sum;
}

void GptModel::backward_chunk(int chunk, int slot, const std::function<void(int)>& after_layer,
                              BackwardPass pass) {
  BATON_ASSERT(chunk >= 0 && chunk < num_chunks(), "chunk {} of {}", chunk, num_chunks());
  BATON_ASSERT(pass == BackwardPass::FULL || split_,
               "split backward without reserve(..., split_backward = true)");
  Slot& s = slots_[slot];
  const bool head = chunks_[chunk].end == dims_.n_layer + 2;
  BATON_ASSERT(!head || s.has_targets, "backward of slot {} without targets", slot);
  LayerCtx ctx = ctx_for(s, true, 0.0f);
  const int first = chunk_first_[chunk], last = chunk_first_[chunk + 1] - 1;
  const bool embedding = chunks_[chunk].begin == 0;
  auto input_of = [&](int l) -> const void* {
    return l > first ? layer_out(s, l - 1) : (embedding ? nullptr : s.input);
  };
  if (pass == BackwardPass::WEIGHT) {
    // Zero bubble's W: every layer's parameter gradients from its saved activations, its input and
    // the output gradients its input part kept (same layer order as FULL, so the tied wte of a
    // whole model accumulates in the same order).
    for (int l = last; l >= first; --l) {
      if (!recomputes(l))  // else done whole in INPUT
        layers_[l]->backward_weight(ctx, input_of(l), layer_saved(s, l),
                                    s.deferred + deferred_offsets_[l]);
      if (after_layer) after_layer(l);
    }
    return;
  }
  const void* dout = head ? nullptr : s.dout;
  for (int l = last; l >= first; --l) {
    const void* in = input_of(l);
    void* din = l > first ? dbuf_[l % 2] : (embedding ? nullptr : s.din);
    void* saved = layer_saved(s, l);
    if (recomputes(l)) {
      layers_[l]->forward(ctx, in, recompute_buf_);  // PTD-P §3: recompute, then backward
      saved = recompute_buf_;
    }
    if (pass == BackwardPass::FULL || recomputes(l)) {
      layers_[l]->backward(ctx, in, dout, din, saved);
      if (after_layer && pass == BackwardPass::FULL) after_layer(l);
    } else {
      layers_[l]->backward_input(ctx, in, dout, din, saved, s.deferred + deferred_offsets_[l]);
    }
    dout = din;
  }
}

double GptModel::forward(int slot, const int32_t* tokens, const int32_t* targets, int B, int T,
                         bool training, float dloss) {
  BATON_ASSERT(is_whole_model(), "GptModel::forward needs the whole model on this rank");
  set_batch(slot, tokens, targets, B, T);
  forward_chunk(0, slot, training, dloss);
  return take_loss_sum();
}

void GptModel::backward(int slot, const std::function<void(int)>& after_layer) {
  BATON_ASSERT(is_whole_model(), "GptModel::backward needs the whole model on this rank");
  backward_chunk(0, slot, after_layer);
}

const void* GptModel::logits(int slot) const {
  BATON_ASSERT(!tp_.active(), "full logits are not available under tensor parallelism");
  BATON_ASSERT(has_head(), "logits need the LM head on this rank");
  const Slot& s = slots_[slot];
  auto* head = static_cast<const LmHead*>(layers_.back().get());
  return head->logits(layer_saved(s, num_layers() - 1), s.B, s.T);
}

void GptModel::logits_row_to_host(int slot, int row, float* dst) {
  const size_t Vp = dims_.vocab_padded;
  const void* src = act_at(logits(slot), size_t(row) * Vp, be_.act_size());
  if (be_.act_dtype() == DType::F32) return be_.to_host(dst, src, Vp * sizeof(float));
  std::vector<uint16_t> h(Vp);
  be_.to_host(h.data(), src, Vp * sizeof(uint16_t));
  for (size_t j = 0; j < Vp; ++j) dst[j] = bf16_to_f32(h[j]);
}

}  // namespace baton
