// ClassifierHead; see classifier_head.h.
#include "model/classifier_head.h"

#include <cmath>

namespace baton {

struct ClassifierHead::Saved {
  void* features = nullptr;  // pooled [N,C] (null: the input itself)
  void* pool_state = nullptr;
  void* logits = nullptr;  // [N, classes]; their gradient after a training forward
  float *losses = nullptr, *hits1 = nullptr, *hits5 = nullptr;
};

ClassifierHead::ClassifierHead(ClassifierSpec spec, const Backend& be)
    : s_(std::move(spec)), be_(be), act_size_(be.act_size()) {}

void ClassifierHead::add_params(ParamTable& t) {
  using I = ParamSpec::Init;
  if (s_.init_std > 0) {
    w_ = t.add({.name = s_.name + ".weight", .shape = {s_.classes, s_.C}, .decay = true, .init_std = s_.init_std});
    b_ = t.add({.name = s_.name + ".bias", .shape = {s_.classes}, .init = I::ZEROS});
    return;
  }
  const float bound = 1.0f / std::sqrt(float(s_.C));  // kaiming_uniform(a = √5) and its bias rule
  w_ = t.add({.name = s_.name + ".weight", .shape = {s_.classes, s_.C}, .decay = true, .init = I::UNIFORM,
              .init_bound = bound});
  b_ = t.add({.name = s_.name + ".bias", .shape = {s_.classes}, .init = I::UNIFORM, .init_bound = bound});
}

Pool2d ClassifierHead::pool(int N) const {
  return Pool2d{.N = N, .C = s_.C, .H = s_.H, .W = s_.W, .R = s_.H, .S = s_.W, .stride = 1, .pad = 0,
                .max = false};
}

ClassifierHead::Saved ClassifierHead::views(Carver& c, int B) const {
  Saved v;
  if (pools()) {
    v.features = c.act(size_t(B) * s_.C);
    v.pool_state = c.f32((be_.pool2d_workspace_bytes(pool(B)) + sizeof(float) - 1) / sizeof(float));
  }
  v.logits = c.act(size_t(B) * s_.classes);
  v.losses = c.f32(size_t(B));
  v.hits1 = c.f32(size_t(B));
  v.hits5 = c.f32(size_t(B));
  return v;
}

ClassifierHead::Saved ClassifierHead::views(const void* saved, int B) const {
  Carver c{const_cast<void*>(saved), act_size_};
  return views(c, B);
}

size_t ClassifierHead::saved_bytes(int B, int) const {
  return carved_bytes(act_size_, [&](Carver& c) { views(c, B); });
}

size_t ClassifierHead::workspace_bytes(int B, int) const { return pools() ? size_t(B) * s_.C * act_size_ : 0; }

void* ClassifierHead::output(void* saved, int B, int) const { return views(saved, B).losses; }

const float* ClassifierHead::metric(const void* saved, int B, int, int m) const {
  const Saved v = views(saved, B);
  return m == 0 ? v.hits1 : v.hits5;
}

void ClassifierHead::forward(const LayerCtx& ctx, const void* in, void* saved) {
  Backend& be = *ctx.be;
  const Saved v = views(saved, ctx.B);
  const void* features = in;
  if (pools()) {
    be.pool2d_forward(v.features, v.pool_state, in, pool(ctx.B));
    features = v.features;
  }
  be.matmul_forward(v.logits, features, ctx.param(w_), ctx.param(b_), ctx.B, s_.C, s_.classes);
  if (!ctx.targets) return;
  if (!ctx.training)
    be.classification_hits(v.hits1, v.hits5, v.logits, ctx.targets, ctx.B, s_.classes, s_.classes);
  be.softmax_cross_entropy(v.losses, ctx.training ? v.logits : nullptr, v.logits, ctx.targets, ctx.B, s_.classes,
                           s_.classes, ctx.loss_scale);
}

void ClassifierHead::backward(const LayerCtx& ctx, const void* in, const void*, void* din, void* saved) {
  Backend& be = *ctx.be;
  const Saved v = views(saved, ctx.B);
  void* dfeatures = pools() ? ctx.workspace : din;
  const LayerCtx::ParamGrads g = ctx.write_grads(w_, b_);
  be.matmul_backward(dfeatures, g.w, g.b, v.logits, pools() ? v.features : in, ctx.param(w_), ctx.B, s_.C,
                     s_.classes, false, g.accumulate);
  if (pools() && din) be.pool2d_backward(din, dfeatures, v.pool_state, pool(ctx.B));
}

}  // namespace baton
