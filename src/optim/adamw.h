// AdamW (Loshchilov & Hutter): Adam moments with decoupled weight decay, applied to the parameters
// whose ParamSpec says `decay` (2-D weights; not biases, norms; optimizer.h). The optimizer updates
// a list of segments of the flat parameter buffer (every parameter, or with ZeRO-1 this rank's
// pieces); its fp32 state m and v ("optim/m/", "optim/v/" in checkpoints) hold the segments back to
// back. AdamW's decay is decoupled by definition (optim.weight_decay_mode = "l2" is refused).
#pragma once
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "config/config.h"
#include "model/param_table.h"
#include "optim/data_parallel.h"
#include "optim/optimizer.h"

namespace baton {

class AdamW final : public Optimizer {
 public:
  // Updates every parameter of `table` (state laid out like the parameters).
  AdamW(Backend& be, const ParamTable& table, const OptimConfig& cfg);
  // Updates `segments` only; state of `state_size` floats.
  AdamW(Backend& be, std::vector<UpdateSegment> segments, size_t state_size, const OptimConfig& cfg);
  ~AdamW() override;

  void step(float* params, const float* grads, double lr, float grad_scale, int64_t step) override;
  std::vector<State> state() override { return {{"optim/m/", m_}, {"optim/v/", v_}}; }
  float* m() { return m_; }
  float* v() { return v_; }

 private:
  float* m_ = nullptr;
  float* v_ = nullptr;
  std::vector<AdamWSegment> tensors_;  // segments_ with their weight decay, the same every step
};

// Global L2 norm of the gradients and the scale that clips it to `max_norm` (1 when max_norm = 0
// or the norm is below it).
struct ClipResult {
  double norm = 0;
  float scale = 1;
};
ClipResult clip_by_global_norm(Backend& be, const float* grads, size_t n, double max_norm);

}  // namespace baton
