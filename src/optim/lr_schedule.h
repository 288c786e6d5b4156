// Learning-rate schedule: linear warm-up from 0 to lr over warmup_steps, then decay to min_lr by the
// last step ("cosine" | "linear"), or stay at lr ("constant"). A pure function of the step, so a
// resumed run continues the schedule exactly.
#pragma once
#include <cstdint>
#include <string>

namespace baton {

struct LrSchedule {
  double lr = 6e-4;
  double min_lr = 6e-5;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  std::string decay = "cosine";

  // Learning rate for optimizer step `step` (0-based).
  double at(int64_t step) const;
};

}  // namespace baton
