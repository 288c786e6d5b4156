// WSP's deterministic mode (issue 13 item 7): a seeded schedule of which virtual worker progresses
// next, driving WorkerClocks and a ServerClock in one process. The same (params, speeds, seed)
// gives the same event trace on every machine, so a WSP run driven by it is reproducible bit for
// bit, and tests check the paper's statements on the protocol's own trace.
//
// Model of time: one step finishes the oldest in-flight minibatch of one VW, chosen among the VWs
// with work in flight with probability proportional to its relative speed (Rng, core/rng.h).
// Everything else follows at once, in this order: the push (if the minibatch ended a wave), the
// server's clock, every pull that c_global now satisfies (VWs in index order; each returns the
// w_global of that moment), then every minibatch the local rule and the pull gate let start.
// A VW with nothing in flight is waiting for the server; all VWs waiting at once would be a
// protocol bug (asserted).
#pragma once
#include <cstdint>
#include <vector>

#include "wsp/trace.h"
#include "wsp/wave.h"

namespace baton::wsp {

struct InterleavingSpec {
  WspParams params;
  int waves = 1;              // waves each VW runs
  std::vector<double> speed;  // per VW, > 0 (empty: all 1)
  uint64_t seed = 0;
};

struct Interleaving {
  Trace trace;             // every VW's and the server's events, in order
  std::vector<int> order;  // the VW chosen at each step (the schedule a runtime replays)
};

Interleaving interleave(const InterleavingSpec& spec);

}  // namespace baton::wsp
