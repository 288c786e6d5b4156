#include "model/lm_head.h"

#include <algorithm>

namespace baton {

struct LmHead::Saved {
  float *lnf, *mean, *rstd, *lnf_full, *logits, *losses;
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

LmHead::Saved LmHead::views(float* s, int B, int T) const {
  const size_t N = size_t(B) * T, Nl = tp_.local_rows(B * T), C = d_.d_model;
  Saved v{};
  v.lnf = s;
  v.mean = v.lnf + Nl * C;
  v.rstd = v.mean + Nl;
  v.lnf_full = tp_.sp() ? v.rstd + Nl : v.lnf;
  v.logits = (tp_.sp() ? v.lnf_full + N * C : v.rstd + Nl);
  v.losses = v.logits + N * (d_.vocab_padded / tp_.size);
  return v;
}

size_t LmHead::saved_floats(int B, int T) const {
  const size_t N = size_t(B) * T, Nl = tp_.local_rows(B * T), C = d_.d_model;
  return Nl * C + 2 * Nl + (tp_.sp() ? N * C : 0) + N * (d_.vocab_padded / tp_.size) + N;
}

// dlnf partial [N,C], its reduce-scatter [Nl,C], classifier statistics [3N].
size_t LmHead::workspace_floats(int B, int T) const {
  const size_t N = size_t(B) * T, Nl = tp_.local_rows(B * T), C = d_.d_model;
  return N * C + Nl * C + 3 * N;
}

float* LmHead::logits(float* saved, int B, int T) const { return views(saved, B, T).logits; }
float* LmHead::output(float* saved, int B, int T) const { return views(saved, B, T).losses; }

// Losses (and, in training, the logits gradient in place). Vocab-parallel with tp > 1: the row max
// is all-reduced (MAX), then the sums of exponentials and the target logits (SUM, one call).
void LmHead::cross_entropy(const LayerCtx& ctx, float* logits, float* losses, int N) const {
  Backend& be = *ctx.be;
  float* dlogits = ctx.training ? logits : nullptr;
  if (!tp_.active()) {
    be.softmax_cross_entropy(losses, dlogits, logits, ctx.targets, N, d_.vocab, d_.vocab_padded,
                             ctx.dloss);
    return;
  }
  const int Vl = d_.vocab_padded / tp_.size, start = tp_.rank * Vl;
  const int V_local = std::clamp(d_.vocab - start, 0, Vl);
  const size_t Nl = tp_.local_rows(N), C = d_.d_model;
  float* stats = ctx.workspace + size_t(N) * C + Nl * C;
  float *maxv = stats, *sumexp = stats + N, *target = stats + 2 * size_t(N);
  be.logits_row_max(maxv, logits, N, V_local, Vl);
  tp_.all_reduce_max(maxv, N);
  be.logits_sumexp_target(sumexp, target, logits, maxv, ctx.targets, N, V_local, Vl, start);
  tp_.all_reduce_sum(sumexp, 2 * size_t(N));
  be.cross_entropy_finish(losses, dlogits, logits, maxv, sumexp, target, ctx.targets, N, V_local,
                          Vl, start, ctx.dloss);
}

void LmHead::forward(const LayerCtx& ctx, const float* x, float* saved) {
  const int N = ctx.B * ctx.T, Nl = tp_.local_rows(N), C = d_.d_model;
  const int Vl = d_.vocab_padded / tp_.size;
  Saved s = views(saved, ctx.B, ctx.T);
  ctx.be->layernorm_forward(s.lnf, s.mean, s.rstd, x, ctx.param(lnf_w_), ctx.param(lnf_b_), Nl, C);
  const float* lnf = tp_.enter(s.lnf, s.lnf_full, N, C);
  ctx.be->matmul_forward(s.logits, lnf, ctx.param(wte_), nullptr, N, C, Vl);
  if (ctx.targets) cross_entropy(ctx, s.logits, s.losses, N);
}

void LmHead::backward(const LayerCtx& ctx, const float* x, const float*, float* dx, float* saved) {
  const int N = ctx.B * ctx.T, Nl = tp_.local_rows(N), C = d_.d_model;
  const int Vl = d_.vocab_padded / tp_.size;
  Saved s = views(saved, ctx.B, ctx.T);
  float* dpartial = ctx.workspace;
  float* dlocal = ctx.workspace + size_t(N) * C;
  ctx.be->matmul_backward(dpartial, ctx.grad(wte_), nullptr, s.logits, s.lnf_full, ctx.param(wte_),
                          N, C, Vl, false);
  const float* dlnf = tp_.enter_backward(dpartial, dlocal, N, C);
  ctx.be->zero(dx, size_t(Nl) * C);
  ctx.be->layernorm_backward(dx, ctx.grad(lnf_w_), ctx.grad(lnf_b_), dlnf, x, ctx.param(lnf_w_),
                             s.mean, s.rstd, Nl, C);
}

void LmHead::backward_input(const LayerCtx& ctx, const float* x, const float*, float* dx,
                            float* saved, float* deferred) {
  const int N = ctx.B * ctx.T, Nl = tp_.local_rows(N), C = d_.d_model;
  const int Vl = d_.vocab_padded / tp_.size;
  Saved s = views(saved, ctx.B, ctx.T);
  float* dpartial = ctx.workspace;
  ctx.be->matmul_backward(dpartial, nullptr, nullptr, s.logits, s.lnf_full, ctx.param(wte_), N, C,
                          Vl, false);
  const float* dlnf = tp_.enter_backward(dpartial, deferred, N, C);
  if (dlnf != deferred) ctx.be->copy(deferred, dlnf, size_t(Nl) * C);
  ctx.be->zero(dx, size_t(Nl) * C);
  ctx.be->layernorm_backward(dx, nullptr, nullptr, deferred, x, ctx.param(lnf_w_), s.mean, s.rstd,
                             Nl, C);
}

void LmHead::backward_weight(const LayerCtx& ctx, const float* x, float* saved, float* deferred) {
  const int N = ctx.B * ctx.T, Nl = tp_.local_rows(N), C = d_.d_model;
  const int Vl = d_.vocab_padded / tp_.size;
  Saved s = views(saved, ctx.B, ctx.T);
  ctx.be->matmul_backward(nullptr, ctx.grad(wte_), nullptr, s.logits, s.lnf_full, nullptr, N, C, Vl,
                          false);
  ctx.be->layernorm_backward(nullptr, ctx.grad(lnf_w_), ctx.grad(lnf_b_), deferred, x, nullptr,
                             s.mean, s.rstd, Nl, C);
}

}  // namespace baton
