// Emulating a slower device on a CPU rank (issue 13 item 5, docs/hetpipe.md "Heterogeneity on one
// machine"): a compute interval of c CPU seconds (the training thread's own, so not inflated while
// other ranks share its core) takes factor × c on the emulated device, as on a device `factor`
// times slower; after it the rank sleeps what its wall time w fell short of that, factor × c − w
// (nothing when sharing the core already made it longer). So ranks oversubscribing the machine's
// cores are each as fast as their device, as long as the contention stays below the factor:
// lockstep runs (WSP with D = 0) and free-running ones share the cores alike. Sleeping, not
// spinning, so ranks sharing the machine's cores keep them.
//
// factor(p) = slowdown × j(e), j(e) in [1, 1 + jitter] drawn from a hash of (seed, rank, e) alone,
// e = ⌊(p − 1) / span⌋ + 1 the straggler episode of minibatch p (p from 1; span 1: e = p): the same
// run gives the same factors whatever the timing (reproducible emulated variability). With a VW
// given (hetero.jitter_scope = "vw") j(e) is drawn from (seed, vw, e) instead, a stream of its own:
// every stage of the VW is slowed alike, the VW straggles as a whole. With a probability q < 1
// (hetero.jitter_probability) an episode straggles only when a second draw from the same key,
// (seed, rank or VW, e) in a stream of its own, falls below q — else j(e) = 1: occasional
// stragglers (a noisy neighbour, a GC pause, a throttled card) instead of constant variation. The
// straggling episodes keep the factor q = 1 gives them, so q = 1 is the old draws bit for bit.
#pragma once
#include <cstdint>

#include "core/timer.h"

namespace baton {

class ComputeStretch {
 public:
  // slowdown >= 1, jitter >= 0, span >= 1 (Error otherwise). slowdown = 1, jitter = 0: no stretch.
  // vw >= 0: the jitter factors are that VW's (shared by its ranks), else the rank's own.
  // probability in (0, 1]: the share of episodes that straggle (1 = every episode draws a factor).
  ComputeStretch(double slowdown, double jitter, uint64_t seed, int rank, int span = 1, int vw = -1,
                 double probability = 1);

  // The factor minibatch `minibatch` (from 1)'s compute is stretched by, >= slowdown, <= slowdown ×
  // (1 + jitter); the same for the `span` minibatches of one episode.
  double factor(int64_t minibatch) const;
  // Sleeps factor(minibatch) × t.cpu − t.wall (when positive); returns the seconds actually slept.
  double stretch(WorkTime t, int64_t minibatch) const;

  double slowdown() const { return slowdown_; }
  double jitter() const { return jitter_; }
  bool active() const { return slowdown_ != 1 || jitter_ != 0; }

 private:
  double slowdown_, jitter_, probability_;
  uint64_t seed_;
  int rank_, span_, vw_;
};

}  // namespace baton
