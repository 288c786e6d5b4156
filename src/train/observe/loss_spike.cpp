// LossSpikeGuard; see loss_spike.h.
#include "train/observe/loss_spike.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

namespace baton {

std::optional<std::string> LossSpikeGuard::check(int64_t step, double loss) {
  if (factor_ <= 0) return std::nullopt;
  const size_t needed = static_cast<size_t>(std::min(window_, 20));
  if (recent_.size() >= needed) {
    std::vector<double> v(recent_.begin(), recent_.end());
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    const double median = v[v.size() / 2];
    if (median > 0 && loss > factor_ * median)
      return fmt::format("loss spike at step {}: {:.4g} is {:.3g}x the median {:.4g} of the previous {} steps",
                         step, loss, loss / median, median, recent_.size());
  }
  recent_.push_back(loss);
  if (recent_.size() > static_cast<size_t>(window_)) recent_.pop_front();
  return std::nullopt;
}

}  // namespace baton
