// Learning-rate schedule: linear warm-up from 0 to lr over warmup_steps, then decay to min_lr by the
// last step ("cosine" | "linear"), stay at lr ("constant"), or drop by step_gamma every step_size
// steps after the warm-up ("step", the classic ImageNet schedule; min_lr is a floor). A pure
// function of the step, so a resumed run continues the schedule exactly.
#pragma once
#include <cstdint>
#include <string>

#include "config/config.h"

namespace baton {

struct LrSchedule {
  double lr = 6e-4;
  double min_lr = 6e-5;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  std::string decay = "cosine";
  int64_t step_size = 0;   // "step"
  double step_gamma = 0.1;  // "step"

  // Learning rate for optimizer step `step` (0-based).
  double at(int64_t step) const;
};

// The schedule optim.* describes for a run of `total_steps` steps.
LrSchedule lr_schedule(const OptimConfig& o, int64_t total_steps);

}  // namespace baton
