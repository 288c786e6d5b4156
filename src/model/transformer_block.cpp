#include "model/transformer_block.h"

#include <cmath>

#include <fmt/format.h>

#include "model/gpt_dropout.h"

namespace baton {

struct TransformerBlock::Saved {
  void *ln1, *ln1_full, *qkv, *atty, *x2, *ln2, *ln2_full, *fch, *fch_gelu, *out;
  float *mean1, *rstd1, *mean2, *rstd2, *att;
};

struct TransformerBlock::Workspace {
  void* dx2;       // [Nl,C] gradient of the mid-block residual stream
  void* dlocal;    // [Nl,C] reduce-scatter target; forward: reduced projection output
  void* dfull;     // [N,C]  all-gather target
  void* dpartial;  // [N,C]  partial sums leaving/entering a tensor-parallel region
  void* big;       // [N,4Cl] dfch, later datty | dqkv
  float* att;      // attention state (selective recomputation only)
};

TransformerBlock::TransformerBlock(const GptDims& d, int index, const TensorParallel& tp,
                                   const Backend& be, bool recompute_attention)
    : d_(d), index_(index), tp_(tp), be_(be), act_size_(be.act_size()) {
  // Recompute only what is worth it: a state of O(T) floats per head row costs no memory.
  const int Cl = d.d_model / tp.size, NHl = d.n_head / tp.size, T = d.seq_len;
  recompute_attention_ =
      recompute_attention && be.attention_state_floats(1, T, Cl, NHl) > size_t(NHl) * T;
}

size_t TransformerBlock::state_floats(int B, int T) const {
  return be_.attention_state_floats(B, T, d_.d_model / tp_.size, d_.n_head / tp_.size);
}

std::string TransformerBlock::name() const { return fmt::format("h.{}", index_); }

void TransformerBlock::add_params(ParamTable& t) {
  const int64_t C = d_.d_model, Cl = C / tp_.size;
  const std::string p = name();
  // GPT-2: residual projections start at std 0.02/sqrt(2L) so the residual stream's variance does
  // not grow with depth.
  const float proj_std = 0.02f / std::sqrt(2.0f * d_.n_layer);
  using I = ParamSpec::Init;
  const bool sp = tp_.sequence_parallel;
  ln1_w_ = t.add({.name = p + ".ln1.weight", .shape = {C}, .sp_partial = sp, .init = I::ONES});
  ln1_b_ = t.add({.name = p + ".ln1.bias", .shape = {C}, .sp_partial = sp, .init = I::ZEROS});
  qkv_w_ = t.add({.name = p + ".attn.qkv.weight", .shape = {3 * Cl, C}, .decay = true, .tp_dim = 0,
                  .tp_blocks = 3});
  qkv_b_ = t.add({.name = p + ".attn.qkv.bias", .shape = {3 * Cl}, .tp_dim = 0, .tp_blocks = 3,
                  .init = I::ZEROS});
  proj_w_ = t.add({.name = p + ".attn.proj.weight", .shape = {C, Cl}, .decay = true, .tp_dim = 1,
                   .init_std = proj_std});
  proj_b_ = t.add({.name = p + ".attn.proj.bias", .shape = {C}, .init = I::ZEROS});
  ln2_w_ = t.add({.name = p + ".ln2.weight", .shape = {C}, .sp_partial = sp, .init = I::ONES});
  ln2_b_ = t.add({.name = p + ".ln2.bias", .shape = {C}, .sp_partial = sp, .init = I::ZEROS});
  fc_w_ = t.add({.name = p + ".mlp.fc.weight", .shape = {4 * Cl, C}, .decay = true, .tp_dim = 0});
  fc_b_ = t.add({.name = p + ".mlp.fc.bias", .shape = {4 * Cl}, .tp_dim = 0, .init = I::ZEROS});
  fcproj_w_ = t.add({.name = p + ".mlp.proj.weight", .shape = {C, 4 * Cl}, .decay = true,
                     .tp_dim = 1, .init_std = proj_std});
  fcproj_b_ = t.add({.name = p + ".mlp.proj.bias", .shape = {C}, .init = I::ZEROS});
}

TransformerBlock::Saved TransformerBlock::views(Carver& c, int B, int T) const {
  const size_t N = size_t(B) * T, Nl = tp_.local_rows(B * T), C = d_.d_model;
  const size_t Cl = C / tp_.size;
  Saved v{};
  v.ln1 = c.act(Nl * C);
  v.mean1 = c.f32(Nl);
  v.rstd1 = c.f32(Nl);
  v.ln1_full = tp_.sp() ? c.act(N * C) : v.ln1;
  v.qkv = c.act(N * 3 * Cl);
  v.atty = c.act(N * Cl);
  v.att = recompute_attention_ ? nullptr : c.f32(state_floats(B, T));
  v.x2 = c.act(Nl * C);
  v.ln2 = c.act(Nl * C);
  v.mean2 = c.f32(Nl);
  v.rstd2 = c.f32(Nl);
  v.ln2_full = tp_.sp() ? c.act(N * C) : v.ln2;
  v.fch = c.act(N * 4 * Cl);
  v.fch_gelu = c.act(N * 4 * Cl);
  v.out = c.act(Nl * C);
  return v;
}

TransformerBlock::Saved TransformerBlock::views(void* s, int B, int T) const {
  Carver c{s, act_size_};
  return views(c, B, T);
}

size_t TransformerBlock::saved_bytes(int B, int T) const {
  return carved_bytes(act_size_, [&](Carver& c) { views(c, B, T); });
}

TransformerBlock::Workspace TransformerBlock::scratch(Carver& c, int B, int T) const {
  const size_t N = size_t(B) * T, Nl = tp_.local_rows(B * T), C = d_.d_model;
  Workspace w{};
  w.dx2 = c.act(Nl * C);
  w.dlocal = c.act(Nl * C);
  w.dfull = c.act(N * C);
  w.dpartial = c.act(N * C);
  w.big = c.act(N * 4 * (C / tp_.size));
  w.att = recompute_attention_ ? c.f32(state_floats(B, T)) : nullptr;
  return w;
}

TransformerBlock::Workspace TransformerBlock::scratch(void* ws, int B, int T) const {
  Carver c{ws, act_size_};
  return scratch(c, B, T);
}

size_t TransformerBlock::workspace_bytes(int B, int T) const {
  return carved_bytes(act_size_, [&](Carver& c) { scratch(c, B, T); });
}

void* TransformerBlock::output(void* saved, int B, int T) const { return views(saved, B, T).out; }

void TransformerBlock::forward(const LayerCtx& ctx, const void* x, void* saved) {
  Backend& be = *ctx.be;
  const int N = ctx.B * ctx.T, Nl = tp_.local_rows(N), C = d_.d_model, Cl = C / tp_.size;
  const int NHl = d_.n_head / tp_.size;
  Saved s = views(saved, ctx.B, ctx.T);
  Workspace w = scratch(ctx.workspace, ctx.B, ctx.T);
  // Row-parallel biases are added once, by tensor-parallel rank 0, before the partial sums meet.
  const bool add_bias = tp_.rank == 0;
  // Attention: x2 = x + proj(attention(qkv(ln1(x))))
  be.layernorm_forward(s.ln1, s.mean1, s.rstd1, x, ctx.param(ln1_w_), ctx.param(ln1_b_), Nl, C);
  const void* ln1 = tp_.enter(s.ln1, s.ln1_full, N, C);
  be.matmul_forward(s.qkv, ln1, ctx.param(qkv_w_), ctx.param(qkv_b_), N, C, 3 * Cl);
  float* att = recompute_attention_ ? w.att : s.att;
  be.attention_forward(s.atty, att, s.qkv, ctx.B, ctx.T, Cl, NHl);
  be.matmul_forward(w.dpartial, s.atty, ctx.param(proj_w_), add_bias ? ctx.param(proj_b_) : nullptr,
                    N, Cl, C);
  const void* attn_out = tp_.exit(w.dpartial, w.dlocal, N, C);
  drop(ctx, const_cast<void*>(attn_out), attn_out, 0);  // a workspace buffer: dropped in place
  be.residual_layernorm_forward(s.x2, s.ln2, s.mean2, s.rstd2, x, attn_out, ctx.param(ln2_w_),
                                ctx.param(ln2_b_), Nl, C);
  // MLP: out = x2 + fcproj(gelu(fc(ln2(x2))))
  const void* ln2 = tp_.enter(s.ln2, s.ln2_full, N, C);
  be.matmul_gelu_forward(s.fch, s.fch_gelu, ln2, ctx.param(fc_w_), ctx.param(fc_b_), N, C, 4 * Cl);
  be.matmul_forward(w.dpartial, s.fch_gelu, ctx.param(fcproj_w_),
                    add_bias ? ctx.param(fcproj_b_) : nullptr, N, 4 * Cl, C);
  const void* mlp_out = tp_.exit(w.dpartial, w.dlocal, N, C);
  drop(ctx, const_cast<void*>(mlp_out), mlp_out, 1);
  be.residual_forward(s.out, s.x2, mlp_out, size_t(Nl) * C);
}

void TransformerBlock::backward(const LayerCtx& ctx, const void* x, const void* dout, void* dx,
                                void* saved) {
  Backend& be = *ctx.be;
  const int N = ctx.B * ctx.T, Nl = tp_.local_rows(N), C = d_.d_model, Cl = C / tp_.size;
  const int NHl = d_.n_head / tp_.size;
  const size_t NCl = size_t(N) * Cl;
  Saved s = views(saved, ctx.B, ctx.T);
  Workspace w = scratch(ctx.workspace, ctx.B, ctx.T);
  void* dfch = w.big;
  // MLP: out = x2 + fcproj(gelu(fc(ln2(x2)))); the GELU backward rides on fcproj's dinp GEMM.
  const void* dmlp = tp_.exit_backward(dropped(ctx, w.dlocal, dout, 1), w.dfull, N, C);
  const LayerCtx::ParamGrads gfcproj = ctx.write_grads(fcproj_w_, fcproj_b_);
  be.matmul_backward_gelu(dfch, gfcproj.w, gfcproj.b, dmlp, s.fch_gelu, ctx.param(fcproj_w_), s.fch, N, 4 * Cl, C,
                          gfcproj.accumulate);
  const LayerCtx::ParamGrads gfc = ctx.write_grads(fc_w_, fc_b_);
  be.matmul_backward(w.dpartial, gfc.w, gfc.b, dfch, s.ln2_full, ctx.param(fc_w_), N, C, 4 * Cl, false,
                     gfc.accumulate);
  const void* dln2 = tp_.enter_backward(w.dpartial, w.dlocal, N, C);
  // dx2 = dout (the residual's gradient) + ln2's input gradient; dx = dx2 + ln1's, below.
  be.layernorm_backward(w.dx2, dout, ctx.grad(ln2_w_), ctx.grad(ln2_b_), dln2, s.x2, ctx.param(ln2_w_),
                        s.mean2, s.rstd2, Nl, C);
  // Attention: x2 = x + proj(attention(qkv(ln1(x))))
  void* datty = w.big;
  void* dqkv = act_at(w.big, NCl, act_size_);
  const void* dattn = tp_.exit_backward(dropped(ctx, w.dlocal, w.dx2, 0), w.dfull, N, C);
  const LayerCtx::ParamGrads gproj = ctx.write_grads(proj_w_, proj_b_);
  be.matmul_backward(datty, gproj.w, gproj.b, dattn, s.atty, ctx.param(proj_w_), N, Cl, C, false,
                     gproj.accumulate);
  float* att = s.att;
  if (recompute_attention_) {
    // Selective recomputation: the probabilities again from the saved qkv (deterministic, so
    // bit-identical to the forward's). dfull is free here; the recomputed output is discarded.
    att = w.att;
    be.attention_forward(w.dfull, att, s.qkv, ctx.B, ctx.T, Cl, NHl);
  }
  be.attention_backward(dqkv, datty, s.atty, s.qkv, att, ctx.B, ctx.T, Cl, NHl);
  const LayerCtx::ParamGrads gqkv = ctx.write_grads(qkv_w_, qkv_b_);
  be.matmul_backward(w.dpartial, gqkv.w, gqkv.b, dqkv, s.ln1_full, ctx.param(qkv_w_), N, C, 3 * Cl, false,
                     gqkv.accumulate);
  const void* dln1 = tp_.enter_backward(w.dpartial, w.dlocal, N, C);
  be.layernorm_backward(dx, w.dx2, ctx.grad(ln1_w_), ctx.grad(ln1_b_), dln1, x, ctx.param(ln1_w_),
                        s.mean1, s.rstd1, Nl, C);
}

// ---- zero bubble: the backward above split into its input and weight parts (Qi et al. §2) ----

struct TransformerBlock::Deferred {
  void *dmlp, *dfch, *dattn, *dqkv, *dln2, *dln1;
};

TransformerBlock::Deferred TransformerBlock::deferred_views(Carver& c, int B, int T) const {
  const size_t N = size_t(B) * T, Nl = tp_.local_rows(B * T), C = d_.d_model, Cl = C / tp_.size;
  Deferred v{};
  v.dmlp = c.act(N * C);
  v.dfch = c.act(N * 4 * Cl);
  v.dattn = c.act(N * C);
  v.dqkv = c.act(N * 3 * Cl);
  v.dln2 = c.act(Nl * C);
  v.dln1 = c.act(Nl * C);
  return v;
}

size_t TransformerBlock::deferred_bytes(int B, int T) const {
  return carved_bytes(act_size_, [&](Carver& c) { deferred_views(c, B, T); });
}

// The same ops as backward() in the same order with dweight = dbias = null; each matmul's and
// layernorm's output gradient lands in (or is copied to) `deferred`. All tensor-parallel
// collectives are here, so the weight part is local compute only.
void TransformerBlock::backward_input(const LayerCtx& ctx, const void* x, const void* dout,
                                      void* dx, void* saved, void* deferred) {
  Backend& be = *ctx.be;
  const int N = ctx.B * ctx.T, Nl = tp_.local_rows(N), C = d_.d_model, Cl = C / tp_.size;
  const int NHl = d_.n_head / tp_.size;
  const size_t NlC = size_t(Nl) * C;
  Saved s = views(saved, ctx.B, ctx.T);
  Workspace w = scratch(ctx.workspace, ctx.B, ctx.T);
  Carver dc{deferred, act_size_};
  Deferred d = deferred_views(dc, ctx.B, ctx.T);
  auto keep = [&](void* dst, const void* src, size_t n) {
    if (src != dst) be.copy_act(dst, src, n);
  };
  // MLP
  const void* dmlp = tp_.exit_backward(dropped(ctx, w.dlocal, dout, 1), d.dmlp, N, C);
  keep(d.dmlp, dmlp, size_t(N) * C);
  be.matmul_backward_gelu(d.dfch, nullptr, nullptr, d.dmlp, s.fch_gelu, ctx.param(fcproj_w_),
                          s.fch, N, 4 * Cl, C, true);
  be.matmul_backward(w.dpartial, nullptr, nullptr, d.dfch, s.ln2_full, ctx.param(fc_w_), N, C,
                     4 * Cl, false, true);
  const void* dln2 = tp_.enter_backward(w.dpartial, d.dln2, N, C);
  keep(d.dln2, dln2, NlC);
  // Without sequence parallelism (and dropout) the residual gradient dx2 is itself the attention
  // output's gradient (exit_backward is the identity): keep it in the deferred buffer directly.
  void* dx2 = tp_.sp() || d_.dropout > 0 ? w.dx2 : d.dattn;
  be.layernorm_backward(dx2, dout, nullptr, nullptr, d.dln2, s.x2, ctx.param(ln2_w_), s.mean2,
                        s.rstd2, Nl, C);
  // Attention
  void* datty = w.big;
  const void* dattn = tp_.exit_backward(dropped(ctx, w.dlocal, dx2, 0), d.dattn, N, C);
  keep(d.dattn, dattn, size_t(N) * C);
  be.matmul_backward(datty, nullptr, nullptr, d.dattn, s.atty, ctx.param(proj_w_), N, Cl, C, false, true);
  float* att = s.att;
  if (recompute_attention_) {
    att = w.att;
    be.attention_forward(w.dfull, att, s.qkv, ctx.B, ctx.T, Cl, NHl);
  }
  be.attention_backward(d.dqkv, datty, s.atty, s.qkv, att, ctx.B, ctx.T, Cl, NHl);
  be.matmul_backward(w.dpartial, nullptr, nullptr, d.dqkv, s.ln1_full, ctx.param(qkv_w_), N, C,
                     3 * Cl, false, true);
  const void* dln1 = tp_.enter_backward(w.dpartial, d.dln1, N, C);
  keep(d.dln1, dln1, NlC);
  be.layernorm_backward(dx, dx2, nullptr, nullptr, d.dln1, x, ctx.param(ln1_w_), s.mean1, s.rstd1, Nl,
                        C);
}

void TransformerBlock::backward_weight(const LayerCtx& ctx, const void* x, void* saved,
                                       void* deferred) {
  Backend& be = *ctx.be;
  const int N = ctx.B * ctx.T, Nl = tp_.local_rows(N), C = d_.d_model, Cl = C / tp_.size;
  Saved s = views(saved, ctx.B, ctx.T);
  Carver dc{deferred, act_size_};
  Deferred d = deferred_views(dc, ctx.B, ctx.T);
  const LayerCtx::ParamGrads gfcproj = ctx.write_grads(fcproj_w_, fcproj_b_);
  be.matmul_backward(nullptr, gfcproj.w, gfcproj.b, d.dmlp, s.fch_gelu, nullptr, N, 4 * Cl, C, false,
                     gfcproj.accumulate);
  const LayerCtx::ParamGrads gfc = ctx.write_grads(fc_w_, fc_b_);
  be.matmul_backward(nullptr, gfc.w, gfc.b, d.dfch, s.ln2_full, nullptr, N, C, 4 * Cl, false, gfc.accumulate);
  be.layernorm_backward(nullptr, nullptr, ctx.grad(ln2_w_), ctx.grad(ln2_b_), d.dln2, s.x2, nullptr, s.mean2,
                        s.rstd2, Nl, C);
  const LayerCtx::ParamGrads gproj = ctx.write_grads(proj_w_, proj_b_);
  be.matmul_backward(nullptr, gproj.w, gproj.b, d.dattn, s.atty, nullptr, N, Cl, C, false, gproj.accumulate);
  const LayerCtx::ParamGrads gqkv = ctx.write_grads(qkv_w_, qkv_b_);
  be.matmul_backward(nullptr, gqkv.w, gqkv.b, d.dqkv, s.ln1_full, nullptr, N, C, 3 * Cl, false, gqkv.accumulate);
  be.layernorm_backward(nullptr, nullptr, ctx.grad(ln1_w_), ctx.grad(ln1_b_), d.dln1, x, nullptr, s.mean1,
                        s.rstd1, Nl, C);
}

// ---- hidden dropout (model/gpt_dropout.h): branch 0 = attention, 1 = MLP ----

void TransformerBlock::drop(const LayerCtx& ctx, void* y, const void* x, int branch) const {
  if (ctx.training && d_.dropout > 0)
    gpt_dropout(ctx, tp_, y, x, d_.d_model, d_.dropout, block_dropout_site(index_, branch));
}

const void* TransformerBlock::dropped(const LayerCtx& ctx, void* buf, const void* g, int branch) const {
  if (!ctx.training || d_.dropout == 0) return g;
  drop(ctx, buf, g, branch);
  return buf;
}

}  // namespace baton
