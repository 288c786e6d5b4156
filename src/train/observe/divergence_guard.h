// Divergence beyond NaN: a loss that explodes to large finite values (1e13) trains on and is
// checkpointed unless something looks at its size. DivergenceGuard flags a step by three rules
// (issue 22 item 2), each 0 = off:
//   ceiling  from step 1: the loss exceeds `ceiling` × max(the uniform guess's loss — ln V for a
//            GPT, ln classes for a classifier — and the first step's loss). A run that is worse
//            than twice a uniform guess is broken (lr 1.0 from scratch: 9 -> 32 at step 5).
//   jump     the loss exceeds `factor` × the median of the previous `window` accepted losses
//   norm     the gradient norm exceeds `norm_factor` × the median of the previous accepted norms
// The relative rules start once min(window, 8) steps are known. A flagged step enters no history,
// so a loss that stays high never becomes the level it is judged against. The history (first loss,
// recent losses and norms) is saved in checkpoints (state()/restore()): a resumed run is not blind.
#pragma once
#include <cstdint>
#include <deque>
#include <optional>
#include <string>

namespace baton {

struct DivergenceRules {
  double factor = 10;       // train.spike_factor
  int window = 100;         // train.spike_window
  double ceiling = 2;       // train.spike_ceiling
  double norm_factor = 0;   // train.spike_norm_factor
  double uniform_loss = 0;  // ln V or ln classes; 0 = unknown (the first loss alone is the reference)
};

class DivergenceGuard {
 public:
  explicit DivergenceGuard(DivergenceRules rules) : r_(rules) {}
  // The step's loss and gradient norm (1-based step); a description of the divergence when the
  // step is flagged, else nullopt.
  std::optional<std::string> check(int64_t step, double loss, double grad_norm);
  // The history as JSON text (CheckpointMeta::guard_state), and back; "" restores nothing.
  std::string state() const;
  void restore(const std::string& state);

 private:
  DivergenceRules r_;
  double first_loss_ = 0;  // 0: no step seen yet
  std::deque<double> losses_, norms_;
};

}  // namespace baton
