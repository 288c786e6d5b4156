// Emulating a slower device on a CPU rank (issue 13 item 5, docs/hetpipe.md "Heterogeneity on one
// machine"): after each minibatch's compute, the rank sleeps (factor − 1) × the compute's measured
// time, so the minibatch takes factor × as long, as on a device `factor` times slower. Sleeping,
// not spinning, so ranks sharing the machine's cores keep them.
//
// factor(p) = slowdown × j(p), j(p) in [1, 1 + jitter] drawn from a hash of (seed, rank, p) alone:
// the same run gives the same factors whatever the timing (reproducible emulated variability).
#pragma once
#include <cstdint>

namespace baton {

class ComputeStretch {
 public:
  // slowdown >= 1, jitter >= 0 (Error otherwise). slowdown = 1, jitter = 0: no stretch.
  ComputeStretch(double slowdown, double jitter, uint64_t seed, int rank);

  // The factor minibatch `minibatch`'s compute is stretched by, >= slowdown, <= slowdown × (1 + jitter).
  double factor(int64_t minibatch) const;
  // Sleeps (factor(minibatch) − 1) × compute_seconds; returns the seconds actually slept (0 when
  // there is nothing to stretch).
  double stretch(double compute_seconds, int64_t minibatch) const;

  double slowdown() const { return slowdown_; }
  double jitter() const { return jitter_; }
  bool active() const { return slowdown_ != 1 || jitter_ != 0; }

 private:
  double slowdown_, jitter_;
  uint64_t seed_;
  int rank_;
};

}  // namespace baton
