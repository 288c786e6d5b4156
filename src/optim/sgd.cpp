#include "optim/sgd.h"

namespace baton {

Sgd::Sgd(Backend& be, std::vector<UpdateSegment> segments, size_t state_size, const OptimConfig& cfg)
    : Optimizer(be, std::move(segments), state_size, cfg) {
  if (cfg_.momentum > 0) buf_ = alloc_state();
}

Sgd::~Sgd() { be_.release(buf_); }

void Sgd::step(float* params, const float* grads, double lr, float grad_scale, int64_t) {
  SgdArgs a;
  a.lr = static_cast<float>(lr);
  a.momentum = static_cast<float>(cfg_.momentum);
  a.nesterov = cfg_.nesterov;
  a.grad_scale = grad_scale;
  const bool l2 = cfg_.weight_decay_mode == "l2";
  for (const UpdateSegment& s : segments_) {
    const float wd = decay_of(s);
    a.l2 = l2 ? wd : 0.0f;
    a.decoupled = l2 ? 0.0f : wd;
    be_.sgd_step(params + s.flat, grads + s.flat, buf_ ? buf_ + s.state : nullptr, s.n, a);
  }
}

std::vector<Optimizer::State> Sgd::state() {
  if (!buf_) return {};
  return {{"optim/momentum/", buf_}};
}

}  // namespace baton
