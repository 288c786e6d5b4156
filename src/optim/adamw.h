// AdamW (Loshchilov & Hutter): Adam moments with decoupled weight decay, applied only to the
// parameters whose ParamSpec says `decay` (2-D weights; not biases, norms). State m and v are fp32
// flat buffers laid out like the parameters.
#pragma once
#include <cstdint>

#include "backend/backend.h"
#include "config/config.h"
#include "model/param_table.h"

namespace baton {

class AdamW {
 public:
  AdamW(Backend& be, const ParamTable& table, const OptimConfig& cfg);
  ~AdamW();
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;

  // One update with learning rate `lr`; gradients are multiplied by `grad_scale` first (clipping).
  // `step` is the 1-based count of updates, for bias correction.
  void step(float* params, const float* grads, double lr, float grad_scale, int64_t step);
  float* m() { return m_; }
  float* v() { return v_; }

 private:
  Backend& be_;
  const ParamTable& table_;
  OptimConfig cfg_;
  float* m_ = nullptr;
  float* v_ = nullptr;
};

// Global L2 norm of the gradients and the scale that clips it to `max_norm` (1 when max_norm = 0
// or the norm is below it).
struct ClipResult {
  double norm = 0;
  float scale = 1;
};
ClipResult clip_by_global_norm(Backend& be, const float* grads, size_t n, double max_norm);

}  // namespace baton
