// ConvUnit; see conv_unit.h.
#include "model/conv_unit.h"

#include <cmath>

#include "core/error.h"

namespace baton {

void ConvUnit::add_params(ParamTable& t) {
  using I = ParamSpec::Init;
  const float std = std::sqrt(2.0f / float(s_.K * s_.R * s_.R));  // Kaiming normal, fan_out
  w_ = t.add({.name = s_.conv + ".weight", .shape = {s_.K, s_.C, s_.R, s_.R}, .decay = true, .init_std = std});
  if (s_.bias) b_ = t.add({.name = s_.conv + ".bias", .shape = {s_.K}, .init = I::ZEROS});
  if (!s_.batch_norm) return;
  gamma_ = t.add({.name = s_.bn + ".weight", .shape = {s_.K}, .init = I::ONES});
  beta_ = t.add({.name = s_.bn + ".bias", .shape = {s_.K}, .init = I::ZEROS});
  run_mean_ = t.add_buffer({.name = s_.bn + ".running_mean", .shape = {s_.K}, .init = I::ZEROS});
  run_var_ = t.add_buffer({.name = s_.bn + ".running_var", .shape = {s_.K}, .init = I::ONES});
}

Conv2d ConvUnit::conv(int N) const {
  return Conv2d{.N = N, .C = s_.C, .H = s_.H, .W = s_.W, .K = s_.K, .R = s_.R, .S = s_.R,
                .stride = s_.stride, .pad = s_.pad};
}

double ConvUnit::flops_per_sample() const {
  return 2.0 * s_.C * s_.R * s_.R * double(s_.K) * P() * Q();
}

ConvUnit::Saved ConvUnit::carve(Carver& c, int N, bool keep_output) const {
  Saved v;
  if (s_.batch_norm) {
    v.z = c.act(out_elems(N));
    v.mean = c.f32(size_t(s_.K));
    v.var = c.f32(size_t(s_.K));
  }
  if (keep_output) output_to(v, c.act(out_elems(N)));
  return v;
}

void ConvUnit::forward(const LayerCtx& ctx, const void* x, const Saved& s, int N, const void* add_then_relu) const {
  BATON_ASSERT(!(s_.relu && add_then_relu), "{}: a unit with its own ReLU cannot add a shortcut before one", s_.conv);
  Backend& be = *ctx.be;
  const size_t n = out_elems(N);
  const bool relu = s_.relu || add_then_relu;
  be.conv2d_forward(s.z, x, ctx.param(w_), b_ >= 0 ? ctx.param(b_) : nullptr, conv(N));
  if (s_.batch_norm) {
    const int K = s_.K, HW = P() * Q();
    float* mean = ctx.training ? s.mean : ctx.buffer(run_mean_);
    float* var = ctx.training ? s.var : ctx.buffer(run_var_);
    // Batch norm, the addition and the ReLU in one op (one pass over y where the backend fuses).
    if (relu)
      be.batchnorm_relu_forward(s.y, mean, var, s.z, ctx.param(gamma_), ctx.param(beta_), add_then_relu, N, K, HW,
                                kBatchNormEps, ctx.training);
    else
      be.batchnorm_forward(s.y, mean, var, s.z, ctx.param(gamma_), ctx.param(beta_), N, K, HW, kBatchNormEps,
                           ctx.training);
    if (ctx.training) {
      const double count = double(N) * HW;
      const float unbias = count > 1 ? float(count / (count - 1)) : 1.0f;
      be.axpby(ctx.buffer(run_mean_), kBatchNormMomentum, s.mean, 1.0f - kBatchNormMomentum, size_t(K));
      be.axpby(ctx.buffer(run_var_), kBatchNormMomentum * unbias, s.var, 1.0f - kBatchNormMomentum, size_t(K));
    }
    return;
  }
  if (add_then_relu) be.residual_forward(s.y, s.y, add_then_relu, n);
  if (relu) be.relu_forward(s.y, s.y, n);
}

void ConvUnit::backward(const LayerCtx& ctx, const void* x, const void* dy, void* dx, const Saved& s,
                        int N, void* scratch) const {
  Backend& be = *ctx.be;
  const size_t n = out_elems(N);
  void* a = scratch;
  void* b = act_at(scratch, n, be.act_size());
  const void* g = dy;  // gradient w.r.t. the conv output, step by step
  if (s_.relu && s_.batch_norm) {  // one op (fused where the backend can: no pass writing dy·(y > 0))
    be.relu_batchnorm_backward(b, ctx.grad(gamma_), ctx.grad(beta_), dy, s.y, s.z, s.mean, s.var, ctx.param(gamma_),
                               ctx.param(beta_), N, s_.K, P() * Q(), kBatchNormEps, a);
    g = b;
  } else if (s_.relu) {
    be.relu_backward(a, s.y, g, n);
    g = a;
  } else if (s_.batch_norm) {
    be.batchnorm_backward(b, ctx.grad(gamma_), ctx.grad(beta_), g, s.z, s.mean, s.var, ctx.param(gamma_), N,
                          s_.K, P() * Q(), kBatchNormEps);
    g = b;
  }
  be.conv2d_backward(dx, ctx.grad(w_), b_ >= 0 ? ctx.grad(b_) : nullptr, g, x, ctx.param(w_), conv(N));
}

}  // namespace baton
