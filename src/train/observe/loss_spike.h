// Divergence beyond NaN: a loss that explodes to large finite values (1e12) trains on and is
// checkpointed unless something looks at its size. LossSpikeGuard compares each step's loss with
// the median of the previous `window` steps' and reports a spike when it exceeds `factor` times
// that median (train.spike_factor, train.spike_window; factor 0 = off). The check starts once
// min(window, 20) steps are in the window, so a falling early loss or a fresh resume never trips it.
#pragma once
#include <cstdint>
#include <deque>
#include <optional>
#include <string>

namespace baton {

class LossSpikeGuard {
 public:
  LossSpikeGuard(double factor, int window) : factor_(factor), window_(window) {}
  // The step's loss (1-based step); a description of the spike when it is one (the loss is then
  // not added to the window), else nullopt.
  std::optional<std::string> check(int64_t step, double loss);

 private:
  double factor_;
  int window_;
  std::deque<double> recent_;
};

}  // namespace baton
