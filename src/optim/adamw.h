// AdamW (Loshchilov & Hutter): Adam moments with decoupled weight decay, applied only to the
// parameters whose ParamSpec says `decay` (2-D weights; not biases, norms). The optimizer updates
// a list of segments of the flat parameter buffer (every parameter, or with ZeRO-1 this rank's
// pieces); its fp32 state m and v hold the segments back to back.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "config/config.h"
#include "model/param_table.h"
#include "optim/data_parallel.h"

namespace baton {

class AdamW {
 public:
  // Updates every parameter of `table` (state laid out like the parameters).
  AdamW(Backend& be, const ParamTable& table, const OptimConfig& cfg);
  // Updates `segments` only; state of `state_size` floats.
  AdamW(Backend& be, std::vector<UpdateSegment> segments, size_t state_size, const OptimConfig& cfg);
  ~AdamW();
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;

  // One update with learning rate `lr`; gradients are multiplied by `grad_scale` first (clipping).
  // `step` is the 1-based count of updates, for bias correction.
  void step(float* params, const float* grads, double lr, float grad_scale, int64_t step);
  float* m() { return m_; }
  float* v() { return v_; }
  size_t state_size() const { return state_size_; }
  const std::vector<UpdateSegment>& segments() const { return segments_; }

 private:
  Backend& be_;
  std::vector<UpdateSegment> segments_;
  size_t state_size_ = 0;
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
