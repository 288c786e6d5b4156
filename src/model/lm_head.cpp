#include "model/lm_head.h"

#include <algorithm>

namespace baton {

struct LmHead::Saved {
  void *lnf, *lnf_full, *logits;
  float *mean, *rstd, *losses;
};

struct LmHead::Workspace {
  void* dpartial;  // [N,C] dlnf partial sums
  void* dlocal;    // [Nl,C] their reduce-scatter
  float *maxv, *sumexp, *target;  // classifier statistics [N] each (sumexp, target adjacent)
};

void LmHead::add_params(ParamTable& t) {
  using I = ParamSpec::Init;
  const bool sp = tp_.sequence_parallel;
  lnf_w_ = t.add({.name = "lnf.weight", .shape = {d_.d_model}, .sp_partial = sp, .init = I::ONES});
  lnf_b_ = t.add({.name = "lnf.bias", .shape = {d_.d_model}, .sp_partial = sp, .init = I::ZEROS});
  wte_ = t.find("wte");
  if (wte_ < 0)
    wte_ = t.add({.name = "wte", .shape = {d_.vocab_padded / tp_.size, d_.d_model}, .decay = true,
                  .tp_dim = 0, .tied = "lm_head"});
}

LmHead::Saved LmHead::views(Carver& c, int B, int T) const {
  const size_t N = size_t(B) * T, Nl = tp_.local_rows(B * T), C = d_.d_model;
  Saved v{};
  v.lnf = c.act(Nl * C);
  v.mean = c.f32(Nl);
  v.rstd = c.f32(Nl);
  v.lnf_full = tp_.sp() ? c.act(N * C) : v.lnf;
  v.logits = c.act(N * (d_.vocab_padded / tp_.size));
  v.losses = c.f32(N);
  return v;
}

LmHead::Saved LmHead::views(void* s, int B, int T) const {
  Carver c{s, act_size_};
  return views(c, B, T);
}

size_t LmHead::saved_bytes(int B, int T) const {
  return carved_bytes(act_size_, [&](Carver& c) { views(c, B, T); });
}

LmHead::Workspace LmHead::scratch(Carver& c, int B, int T) const {
  const size_t N = size_t(B) * T, Nl = tp_.local_rows(B * T), C = d_.d_model;
  Workspace w{};
  w.dpartial = c.act(N * C);
  w.dlocal = c.act(Nl * C);
  w.maxv = c.f32(N);
  w.sumexp = c.f32(2 * N);  // sumexp | target: one all-reduce
  w.target = w.sumexp ? w.sumexp + N : nullptr;
  return w;
}

size_t LmHead::workspace_bytes(int B, int T) const {
  return carved_bytes(act_size_, [&](Carver& c) { scratch(c, B, T); });
}

void* LmHead::logits(void* saved, int B, int T) const { return views(saved, B, T).logits; }
void* LmHead::output(void* saved, int B, int T) const { return views(saved, B, T).losses; }

// Losses (and, in training, the logits gradient in place). Vocab-parallel with tp > 1: the row max
// is all-reduced (MAX), then the sums of exponentials and the target logits (SUM, one call).
void LmHead::cross_entropy(const LayerCtx& ctx, void* logits, float* losses, int N) const {
  Backend& be = *ctx.be;
  void* dlogits = ctx.training ? logits : nullptr;
  if (!tp_.active()) {
    be.softmax_cross_entropy(losses, dlogits, logits, ctx.targets, N, d_.vocab, d_.vocab_padded,
                             ctx.loss_scale);
    return;
  }
  const int Vl = d_.vocab_padded / tp_.size, start = tp_.rank * Vl;
  const int V_local = std::clamp(d_.vocab - start, 0, Vl);
  Carver c{ctx.workspace, act_size_};
  Workspace w = scratch(c, ctx.B, ctx.T);
  float *maxv = w.maxv, *sumexp = w.sumexp, *target = w.target;
  be.logits_row_max(maxv, logits, N, V_local, Vl);
  tp_.all_reduce_max(maxv, N);
  be.logits_sumexp_target(sumexp, target, logits, maxv, ctx.targets, N, V_local, Vl, start);
  tp_.all_reduce_sum(sumexp, 2 * size_t(N));
  be.cross_entropy_finish(losses, dlogits, logits, maxv, sumexp, target, ctx.targets, N, V_local,
                          Vl, start, ctx.loss_scale);
}

void LmHead::forward(const LayerCtx& ctx, const void* x, void* saved) {
  const int N = ctx.B * ctx.T, Nl = tp_.local_rows(N), C = d_.d_model;
  const int Vl = d_.vocab_padded / tp_.size;
  Saved s = views(saved, ctx.B, ctx.T);
  ctx.be->layernorm_forward(s.lnf, s.mean, s.rstd, x, ctx.param(lnf_w_), ctx.param(lnf_b_), Nl, C);
  const void* lnf = tp_.enter(s.lnf, s.lnf_full, N, C);
  ctx.be->matmul_forward(s.logits, lnf, ctx.param(wte_), nullptr, N, C, Vl);
  if (ctx.targets) cross_entropy(ctx, s.logits, s.losses, N);
}

void LmHead::backward(const LayerCtx& ctx, const void* x, const void*, void* dx, void* saved) {
  const int N = ctx.B * ctx.T, Nl = tp_.local_rows(N), C = d_.d_model;
  const int Vl = d_.vocab_padded / tp_.size;
  Saved s = views(saved, ctx.B, ctx.T);
  Carver c{ctx.workspace, act_size_};
  Workspace w = scratch(c, ctx.B, ctx.T);
  const LayerCtx::ParamGrads g = ctx.write_grads(wte_);
  ctx.be->matmul_backward(w.dpartial, g.w, nullptr, s.logits, s.lnf_full, ctx.param(wte_), N, C, Vl, false,
                          g.accumulate);
  const void* dlnf = tp_.enter_backward(w.dpartial, w.dlocal, N, C);
  // dx = 0 + lnf's input gradient (the head ends the residual stream: nothing to add).
  ctx.be->layernorm_backward(dx, nullptr, ctx.grad(lnf_w_), ctx.grad(lnf_b_), dlnf, x, ctx.param(lnf_w_),
                             s.mean, s.rstd, Nl, C);
}

void LmHead::backward_input(const LayerCtx& ctx, const void* x, const void*, void* dx,
                            void* saved, void* deferred) {
  const int N = ctx.B * ctx.T, Nl = tp_.local_rows(N), C = d_.d_model;
  const int Vl = d_.vocab_padded / tp_.size;
  Saved s = views(saved, ctx.B, ctx.T);
  Carver c{ctx.workspace, act_size_};
  Workspace w = scratch(c, ctx.B, ctx.T);
  ctx.be->matmul_backward(w.dpartial, nullptr, nullptr, s.logits, s.lnf_full, ctx.param(wte_), N,
                          C, Vl, false, true);
  const void* dlnf = tp_.enter_backward(w.dpartial, deferred, N, C);
  if (dlnf != deferred) ctx.be->copy_act(deferred, dlnf, size_t(Nl) * C);
  ctx.be->layernorm_backward(dx, nullptr, nullptr, nullptr, deferred, x, ctx.param(lnf_w_), s.mean,
                             s.rstd, Nl, C);
}

void LmHead::backward_weight(const LayerCtx& ctx, const void* x, void* saved, void* deferred) {
  const int N = ctx.B * ctx.T, Nl = tp_.local_rows(N), C = d_.d_model;
  const int Vl = d_.vocab_padded / tp_.size;
  Saved s = views(saved, ctx.B, ctx.T);
  const LayerCtx::ParamGrads g = ctx.write_grads(wte_);
  ctx.be->matmul_backward(nullptr, g.w, nullptr, s.logits, s.lnf_full, nullptr, N, C, Vl, false, g.accumulate);
  ctx.be->layernorm_backward(nullptr, nullptr, ctx.grad(lnf_w_), ctx.grad(lnf_b_), deferred, x, nullptr,
                             s.mean, s.rstd, Nl, C);
}

}  // namespace baton
