// Timeline: the per-rank record of what ran; see timeline.h.
#include "pipeline/timeline.h"

#include <chrono>

namespace baton::pipeline {

double Timeline::now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void Timeline::begin_step(int64_t step) {
  step_ = step;
  recording_ = steps_ == 0 || static_cast<int64_t>(recorded_.size()) < steps_;
  if (recording_) recorded_.push_back(step);
}

void Timeline::add(Activity what, double start, double end, const Instr& in) {
  if (!recording_) return;
  events_.push_back({.start = start, .end = end, .step = step_, .what = what, .instr = in});
}

}  // namespace baton::pipeline
