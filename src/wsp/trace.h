// The WSP event trace: what the protocol did, in order, emitted by WorkerClock and ServerClock
// themselves (not by whoever drives them), so tests and metrics read the protocol's own account.
// A START carries the version vector of the weights the minibatch uses.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "wsp/version_vector.h"

namespace baton::wsp {

enum class EventKind : uint8_t {
  START,         // VW starts minibatch `minibatch` on weights `weights`; clock = its c_local
  FINISH,        // VW finished minibatch `minibatch`: w_local += u_p
  PUSH,          // VW pushed wave `wave` (its aggregated update ũ), tagged with clock `wave`
  PULL_WAIT,     // end of clock `wave`: VW asked for w_global once c_global ≥ `clock`
  PULL,          // the pull of clock `wave` returned; w_local merged (see WorkerClock)
  CLOCK,         // VW's c_local became `clock`
  GLOBAL_CLOCK,  // the server's c_global became `clock` (vw = -1)
};
const char* to_string(EventKind k);

struct Event {
  EventKind kind;
  int vw = -1;
  int minibatch = 0;  // START, FINISH
  int wave = -1;      // PUSH, PULL_WAIT, PULL
  int clock = 0;      // c_local after the event (VW events); c_global (GLOBAL_CLOCK);
                      // the c_global waited for (PULL_WAIT)
  VersionVector weights;  // START only
};

using Trace = std::vector<Event>;

// One line per event, e.g. "vw0 START 11 c1 w=vw0:1-7 vw1:1-4" (for failures and docs).
std::string to_string(const Event& e);
std::string to_string(const Trace& t);

}  // namespace baton::wsp
