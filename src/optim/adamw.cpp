#include "optim/adamw.h"

#include <cmath>

namespace baton {

AdamW::AdamW(Backend& be, const ParamTable& table, const OptimConfig& cfg)
    : be_(be), table_(table), cfg_(cfg) {
  m_ = static_cast<float*>(be_.alloc(table_.total() * sizeof(float)));
  v_ = static_cast<float*>(be_.alloc(table_.total() * sizeof(float)));
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
  for (int i = 0; i < table_.size(); ++i) {
    a.weight_decay = table_.spec(i).decay ? static_cast<float>(cfg_.weight_decay) : 0.0f;
    const size_t off = table_.offset(i);
    be_.adamw_step(params + off, grads + off, m_ + off, v_ + off, table_.numel(i), a);
  }
}

ClipResult clip_by_global_norm(Backend& be, const float* grads, size_t n, double max_norm) {
  ClipResult r;
  r.norm = std::sqrt(be.sum_squares(grads, n));
  if (max_norm > 0 && r.norm > max_norm) r.scale = static_cast<float>(max_norm / (r.norm + 1e-6));
  return r;
}

}  // namespace baton
