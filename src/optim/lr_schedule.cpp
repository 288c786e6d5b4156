#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace baton {

double LrSchedule::at(int64_t step) const {
  if (step < warmup_steps) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  if (decay == "constant") return lr;
  if (decay == "step") {
    BATON_ASSERT(step_size > 0, "step decay without a step size");
    const double drops = static_cast<double>((step - warmup_steps) / step_size);
    return std::max(min_lr, lr * std::pow(step_gamma, drops));
  }
  const int64_t span = std::max<int64_t>(1, total_steps - warmup_steps);
  const double progress = std::clamp(static_cast<double>(step - warmup_steps) / span, 0.0, 1.0);
  if (decay == "linear") return lr + (min_lr - lr) * progress;
  BATON_ASSERT(decay == "cosine", "unknown decay '{}'", decay);
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(M_PI * progress));
}

LrSchedule lr_schedule(const OptimConfig& o, int64_t total_steps) {
  return LrSchedule{.lr = o.lr, .min_lr = o.min_lr, .warmup_steps = o.warmup_steps,
                    .total_steps = total_steps, .decay = o.decay, .step_size = o.step_size,
                    .step_gamma = o.step_gamma};
}

}  // namespace baton
