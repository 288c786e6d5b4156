#include "model/lm_head.h"

namespace baton {

void LmHead::add_params(ParamTable& t) {
  using I = ParamSpec::Init;
  lnf_w_ = t.add({.name = "lnf.weight", .shape = {d_.d_model}, .init = I::ONES});
  lnf_b_ = t.add({.name = "lnf.bias", .shape = {d_.d_model}, .init = I::ZEROS});
  wte_ = t.find("wte");
  if (wte_ < 0)
    wte_ = t.add({.name = "wte", .shape = {d_.vocab_padded, d_.d_model}, .decay = true,
                  .tp_dim = 0, .tied = "lm_head"});
}

size_t LmHead::saved_floats(int B, int T) const {
  const size_t N = size_t(B) * T;
  return N * d_.d_model + 2 * N + N * d_.vocab_padded + N;
}

size_t LmHead::workspace_floats(int B, int T) const { return size_t(B) * T * d_.d_model; }

float* LmHead::logits(float* saved, int B, int T) const {
  const size_t N = size_t(B) * T;
  return saved + N * d_.d_model + 2 * N;
}

float* LmHead::output(float* saved, int B, int T) const {
  return logits(saved, B, T) + size_t(B) * T * d_.vocab_padded;
}

void LmHead::forward(const LayerCtx& ctx, const float* x, float* saved) {
  const int N = ctx.B * ctx.T, C = d_.d_model;
  float* lnf = saved;
  float* mean = lnf + size_t(N) * C;
  float* rstd = mean + N;
  float* lg = logits(saved, ctx.B, ctx.T);
  ctx.be->layernorm_forward(lnf, mean, rstd, x, ctx.param(lnf_w_), ctx.param(lnf_b_), N, C);
  ctx.be->matmul_forward(lg, lnf, ctx.param(wte_), nullptr, N, C, d_.vocab_padded);
  if (ctx.targets)
    ctx.be->softmax_cross_entropy(output(saved, ctx.B, ctx.T), ctx.training ? lg : nullptr, lg,
                                  ctx.targets, N, d_.vocab, d_.vocab_padded, ctx.dloss);
}

void LmHead::backward(const LayerCtx& ctx, const float* x, const float*, float* dx, float* saved) {
  const int N = ctx.B * ctx.T, C = d_.d_model;
  float* lnf = saved;
  float* mean = lnf + size_t(N) * C;
  float* rstd = mean + N;
  const float* dlogits = logits(saved, ctx.B, ctx.T);
  float* dlnf = ctx.workspace;
  ctx.be->matmul_backward(dlnf, ctx.grad(wte_), nullptr, dlogits, lnf, ctx.param(wte_), N, C,
                          d_.vocab_padded, false);
  ctx.be->zero(dx, size_t(N) * C);
  ctx.be->layernorm_backward(dx, ctx.grad(lnf_w_), ctx.grad(lnf_b_), dlnf, x, ctx.param(lnf_w_),
                             mean, rstd, N, C);
}

}  // namespace baton
