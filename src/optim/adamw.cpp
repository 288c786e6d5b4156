#include "optim/adamw.h"

#include <algorithm>
#include <cmath>

namespace baton {

AdamW::AdamW(Backend& be, const ParamTable& table, const OptimConfig& cfg)
    : AdamW(be, every_parameter(table), table.total(), cfg) {}

AdamW::AdamW(Backend& be, std::vector<UpdateSegment> segments, size_t state_size,
             const OptimConfig& cfg)
    : Optimizer(be, std::move(segments), state_size, cfg) {
  m_ = alloc_state();
  v_ = alloc_state();
  tensors_.reserve(segments_.size());
  for (const UpdateSegment& s : segments_) tensors_.push_back({s.flat, s.state, s.n, decay_of(s)});
}

AdamW::~AdamW() {
  be_.release(m_);
  be_.release(v_);
}

void AdamW::step(float* params, const float* grads, double lr, float grad_scale, int64_t t) {
  AdamWArgs a;
  a.lr = static_cast<float>(lr);
  a.beta1 = static_cast<float>(cfg_.beta1);
  a.beta2 = static_cast<float>(cfg_.beta2);
  a.eps = static_cast<float>(cfg_.eps);
  a.step = t;
  a.grad_scale = grad_scale;
  // One call for every segment: one launch on a GPU, adamw_step per segment on the CPU.
  be_.adamw_step_segments(params, grads, m_, v_, tensors_, a);
}

ClipResult clip_by_global_norm(Backend& be, const float* grads, size_t n, double max_norm) {
  ClipResult r;
  r.norm = std::sqrt(be.sum_squares(grads, n));
  if (max_norm > 0 && r.norm > max_norm) r.scale = static_cast<float>(max_norm / (r.norm + 1e-6));
  return r;
}

}  // namespace baton
