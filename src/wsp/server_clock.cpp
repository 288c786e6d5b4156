// The parameter server's WSP clock (see server_clock.h).
#include "wsp/server_clock.h"

#include <algorithm>

#include "core/error.h"
#include "wsp/wave.h"

namespace baton::wsp {

ServerClock::ServerClock(int num_vw, int nm, Trace* trace)
    : nm_(nm), pushed_(num_vw, 0), global_(num_vw), trace_(trace) {
  BATON_ASSERT(num_vw >= 1 && nm >= 1, "server clock: {} VWs, Nm {}", num_vw, nm);
}

bool ServerClock::push(int vw, int wave, const VersionVector& update) {
  BATON_ASSERT(vw >= 0 && vw < static_cast<int>(pushed_.size()), "push from unknown VW {}", vw);
  BATON_ASSERT(wave == pushed_[vw], "VW {} pushed wave {} but its next wave is {}", vw, wave, pushed_[vw]);
  // ũ aggregates exactly minibatches c·Nm+1 … (c+1)·Nm of the pushing VW (§5).
  const int first = first_of_wave(wave, nm_), last = last_of_wave(wave, nm_);
  for (int v = 0; v < update.num_vw(); ++v)
    BATON_ASSERT(v == vw ? update.count(v) == nm_ && update.contains_range(v, first, last) : update.count(v) == 0,
                 "VW {}'s push of wave {} carries {}, not minibatches {}..{}", vw, wave, update.to_string(),
                 first, last);
  global_.merge(update);
  ++pushed_[vw];
  const int c = *std::min_element(pushed_.begin(), pushed_.end());
  if (c == c_global_) return false;
  c_global_ = c;
  if (trace_) trace_->push_back({.kind = EventKind::GLOBAL_CLOCK, .clock = c_global_});
  return true;
}

}  // namespace baton::wsp
