// The parameter server's side of WSP (HetPipe §5, digest §B.3): it counts the waves each VW has
// pushed, keeps c_global = the number of waves every VW has pushed (= min c_local, see
// worker_clock.h), and the version vector of w_global. The tensors themselves live in the
// parameter server's data path; this is the control plane both the runtime and the tests use.
//
// Invariants (asserted): a VW pushes its waves in order, once each (one push per wave), and a push
// carries exactly the VW's minibatches of that wave; c_global moves to c+1 only once every VW has
// pushed wave c.
#pragma once
#include <vector>

#include "wsp/trace.h"
#include "wsp/version_vector.h"

namespace baton::wsp {

class ServerClock {
 public:
  // `trace` (optional) receives GLOBAL_CLOCK events.
  ServerClock(int num_vw, int nm, Trace* trace = nullptr);

  // w_global += ũ for VW `vw`'s wave `wave`; returns true when c_global advanced.
  bool push(int vw, int wave, const VersionVector& update);

  int c_global() const { return c_global_; }
  int pushed_waves(int vw) const { return pushed_.at(vw); }
  // A pull that waits for c_global ≥ needs may return now.
  bool pull_ready(int needs_c_global) const { return c_global_ >= needs_c_global; }
  const VersionVector& global() const { return global_; }

 private:
  int nm_;
  std::vector<int> pushed_;
  int c_global_ = 0;
  VersionVector global_;
  Trace* trace_;
};

}  // namespace baton::wsp
