// WSP clocks and staleness (src/wsp/): the HetPipe paper's statements checked on the protocol's
// own event trace and version vectors, as produced by the deterministic interleaving.
// Sources: HetPipe §5 "Workings of WSP" and "Global Staleness Bound" ([H] 000_*.txt), its later
// write-up with Figure 13 ([W] 001_*.txt); digest notes-hetpipe-madpipe.md §B and §D.1.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "core/error.h"
#include "core/rng.h"
#include "wsp/interleaving.h"
#include "wsp/server_clock.h"
#include "wsp/worker_clock.h"

namespace baton::wsp {
namespace {

// Index of the first event matching `pred` (trace.size() when none).
size_t find(const Trace& t, const std::function<bool(const Event&)>& pred) {
  return std::find_if(t.begin(), t.end(), pred) - t.begin();
}
size_t find_event(const Trace& t, EventKind k, int vw, int minibatch = 0, int wave = -1) {
  return find(t, [&](const Event& e) {
    return e.kind == k && e.vw == vw && (minibatch == 0 || e.minibatch == minibatch) &&
           (wave < 0 || e.wave == wave);
  });
}

// [W] Figure 13: D = 0, s_local = 3 (Nm = 4), two VWs, whatever their relative speeds.
TEST(WspClocks, PaperWorkedExample) {
  EXPECT_EQ(s_global(0, 4), 6);
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const std::vector<double> speed = seed < 10 ? std::vector<double>{1, 1} : std::vector<double>{1, 3};
    const Interleaving run = interleave({.params = {.num_vw = 2, .nm = 4, .staleness = 0},
                                         .waves = 4, .speed = speed, .seed = seed});
    const Trace& t = run.trace;
    SCOPED_TRACE("seed " + std::to_string(seed) + "\n" + to_string(t));
    for (int v = 0; v < 2; ++v) {
      const int other = 1 - v;
      // Pushes right after minibatches 4 and 8: wave 0 = minibatches 1–4, wave 1 = 5–8.
      for (int wave : {0, 1}) {
        const size_t push = find_event(t, EventKind::PUSH, v, 0, wave);
        ASSERT_LT(push, t.size());
        EXPECT_EQ(push, find_event(t, EventKind::FINISH, v, 4 * (wave + 1)) + 1);
      }
      // Minibatches 5–7 run while c_local is still 0; 8 does not.
      for (int p : {5, 6, 7}) EXPECT_EQ(t[find_event(t, EventKind::START, v, p)].clock, 0) << p;
      const size_t start8 = find_event(t, EventKind::START, v, 8);
      EXPECT_EQ(t[start8].clock, 1);
      // 8 waits for every VW's wave 0.
      for (int u = 0; u < 2; ++u) EXPECT_LT(find_event(t, EventKind::PUSH, u, 0, 0), start8);
      // 12 cannot start until the global updates through minibatch 8 are received.
      const Event& start12 = t[find_event(t, EventKind::START, v, 12)];
      for (int u = 0; u < 2; ++u) EXPECT_TRUE(start12.weights.contains_range(u, 1, 8)) << u;
      EXPECT_GT(find_event(t, EventKind::START, v, 12), find_event(t, EventKind::PULL, v, 0, 1));
      // Minibatch 11: global updates 1–4, and of 5–7 only the VW's own ("5 to 7: only local
      // updates reflected"; "8 to 10: local & global updates not reflected").
      const Event& start11 = t[find_event(t, EventKind::START, v, 11)];
      VersionVector want(2);
      want.add_range(v, 1, 7);
      want.add_range(other, 1, 4);
      EXPECT_EQ(start11.weights, want) << start11.weights.to_string();
      // It misses the 6 most recent minibatches of the other VW (5–10): s_global = 6, reached.
      EXPECT_EQ(11 - 1 - start11.weights.prefix(other), s_global(0, 4));
    }
  }
}

// The same seed gives the same trace; the seed does choose the interleaving.
TEST(WspClocks, DeterministicModeReproducesTheTrace) {
  const InterleavingSpec spec{.params = {.num_vw = 3, .nm = 3, .staleness = 2}, .waves = 8,
                              .speed = {1, 2, 0.5}, .seed = 42};
  const Interleaving a = interleave(spec), b = interleave(spec);
  EXPECT_EQ(to_string(a.trace), to_string(b.trace));
  EXPECT_EQ(a.order, b.order);
  InterleavingSpec other = spec;
  other.seed = 43;
  EXPECT_NE(interleave(other).order, a.order);
}

// Walks a trace, keeping each VW's clock, pushes and finished count as the events report them, and
// checks every WSP statement of the paper (digest §B) plus our merge rule. Returns the largest
// global staleness a minibatch saw.
int check_properties(const WspParams& prm, const Trace& t) {
  const int n = prm.num_vw, nm = prm.nm, d = prm.staleness;
  const int sg = s_global(d, nm);
  std::vector<int> clock(n, 0), pushes(n, 0), finished(n, 0);
  int c_global = 0, worst = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    const Event& e = t[i];
    SCOPED_TRACE("event " + std::to_string(i) + ": " + to_string(e));
    switch (e.kind) {
      case EventKind::START: {
        const int p = e.minibatch, v = e.vw;
        const VersionVector& w = e.weights;
        EXPECT_EQ(e.clock, clock[v]);
        // Local rule: every own update 1 … p − Nm; merge rule: exactly the own finished ones.
        EXPECT_TRUE(w.contains_range(v, 1, p - nm));
        EXPECT_EQ(w.prefix(v), finished[v]);
        EXPECT_EQ(w.count(v), finished[v]);
        // Global bound: every VW's updates 1 … p − (s_global + 1).
        for (int u = 0; u < n; ++u) EXPECT_TRUE(w.contains_range(u, 1, p - sg - 1)) << "vw " << u;
        // A VW at clock c ≥ D+1 uses all updates of waves 0 … c − D − 1 (§5).
        for (int u = 0; u < n; ++u)
          EXPECT_TRUE(w.contains_range(u, 1, (e.clock - d) * nm)) << "vw " << u << " clock " << e.clock;
        // Other VWs' updates arrive only as whole pushed waves, through w_global.
        for (int u = 0; u < n; ++u) {
          if (u == v) continue;
          EXPECT_EQ(w.count(u), w.prefix(u));
          EXPECT_EQ(w.prefix(u) % nm, 0);
          EXPECT_LE(w.prefix(u), pushes[u] * nm);
          worst = std::max(worst, p - 1 - w.prefix(u));
        }
        break;
      }
      case EventKind::FINISH:
        EXPECT_EQ(e.minibatch, finished[e.vw] + 1);  // backwards in minibatch order
        finished[e.vw] = e.minibatch;
        break;
      case EventKind::PUSH:
        // One push per wave, right after the wave's last minibatch, tagged with its clock.
        EXPECT_EQ(e.wave, pushes[e.vw]);
        EXPECT_EQ(finished[e.vw], last_of_wave(e.wave, nm));
        EXPECT_TRUE(i > 0 && t[i - 1].kind == EventKind::FINISH && t[i - 1].vw == e.vw);
        ++pushes[e.vw];
        break;
      case EventKind::PULL_WAIT:
        EXPECT_GE(e.wave, d);  // the first D+1 waves run without querying the server
        EXPECT_EQ(e.clock, e.wave - d + 1);
        break;
      case EventKind::PULL:
        // A pull returns only once every VW has pushed wave c − D.
        for (int u = 0; u < n; ++u) EXPECT_GE(pushes[u], e.wave - d + 1) << "vw " << u;
        break;
      case EventKind::CLOCK:
        EXPECT_EQ(e.clock, clock[e.vw] + 1);
        EXPECT_EQ(pushes[e.vw], e.clock);  // a clock ends with its push
        clock[e.vw] = e.clock;
        break;
      case EventKind::GLOBAL_CLOCK:
        // c_global advances by one, and only once every VW has pushed the wave.
        EXPECT_EQ(e.clock, c_global + 1);
        for (int u = 0; u < n; ++u) EXPECT_GE(pushes[u], e.clock) << "vw " << u;
        c_global = e.clock;
        break;
    }
    // Between steps of the interleaving (a push, its clock and the pulls it releases happen at
    // once; FINISH opens a step, START closes one):
    if (e.kind == EventKind::START || e.kind == EventKind::FINISH) {
      // c_global is the number of waves every VW has pushed (= min c_local) ...
      EXPECT_EQ(c_global, *std::min_element(pushes.begin(), pushes.end()));
      EXPECT_EQ(c_global, *std::min_element(clock.begin(), clock.end()));
      // ... and the clock distance is at most D.
      EXPECT_LE(*std::max_element(clock.begin(), clock.end()) - *std::min_element(clock.begin(), clock.end()), d);
    }
  }
  return worst;
}

// The paper's properties over random D ∈ 0..4, Nm ∈ 1..4, 1–4 VWs and random relative speeds.
TEST(WspClocks, PropertiesOverRandomRuns) {
  Rng rng(2024);
  int runs_reaching_bound = 0;
  for (int run = 0; run < 300; ++run) {
    const WspParams prm{.num_vw = 1 + int(rng.below(4)), .nm = 1 + int(rng.below(4)),
                        .staleness = int(rng.below(5))};
    std::vector<double> speed;
    for (int v = 0; v < prm.num_vw; ++v) speed.push_back(0.25 + 3.75 * rng.uniform());
    const InterleavingSpec spec{.params = prm, .waves = prm.staleness + 2 + int(rng.below(6)),
                                .speed = speed, .seed = rng.next_u64()};
    SCOPED_TRACE(fmt::format("run {}: N {} Nm {} D {} waves {}", run, prm.num_vw, prm.nm, prm.staleness,
                             spec.waves));
    const Interleaving out = interleave(spec);
    // Everyone ran every wave.
    for (int v = 0; v < prm.num_vw; ++v)
      EXPECT_LT(find_event(out.trace, EventKind::FINISH, v, spec.waves * prm.nm), out.trace.size());
    const int worst = check_properties(prm, out.trace);
    EXPECT_LE(worst, s_global(prm.staleness, prm.nm));
    if (prm.num_vw > 1 && worst == s_global(prm.staleness, prm.nm)) ++runs_reaching_bound;
    if (HasFailure()) return;  // one run's report is enough
  }
  // The bound is tight: some runs see exactly s_global missing updates.
  EXPECT_GT(runs_reaching_bound, 0);
}

// One VW: WSP is HetPipe's pipelined model parallelism alone — minibatch p sees exactly the local
// updates 1 … p − Nm (§4: "minibatches 1 … s_local+1 use w0"), and never waits for the server.
TEST(WspClocks, OneVirtualWorkerIsThePipelineLocalRule) {
  for (int nm = 1; nm <= 4; ++nm)
    for (int d = 0; d <= 2; ++d) {
      const Interleaving out = interleave({.params = {.num_vw = 1, .nm = nm, .staleness = d}, .waves = 5});
      for (const Event& e : out.trace) {
        if (e.kind != EventKind::START) continue;
        VersionVector want(1);
        want.add_range(0, 1, e.minibatch - nm);
        EXPECT_EQ(e.weights, want) << "Nm " << nm << " minibatch " << e.minibatch;
      }
    }
}

// The clocks refuse what WSP forbids, instead of running it.
TEST(WspClocks, ProtocolViolationsAreCaught) {
  Trace t;
  ServerClock server(2, 2, &t);
  VersionVector wave0(2);
  wave0.add_range(0, 1, 2);
  EXPECT_THROW(server.push(0, 1, wave0), Error);  // waves in order
  VersionVector partial(2);
  partial.add(0, 1);
  EXPECT_THROW(server.push(0, 0, partial), Error);  // a whole wave at once
  EXPECT_FALSE(server.push(0, 0, wave0));           // c_global waits for VW 1
  EXPECT_EQ(server.c_global(), 0);
  EXPECT_THROW(server.push(0, 0, wave0), Error);    // one push per wave

  WorkerClock w(0, {.num_vw = 2, .nm = 2, .staleness = 0});
  w.start();
  w.start();
  EXPECT_FALSE(w.startable());  // Nm in flight
  EXPECT_FALSE(w.finish());
  EXPECT_EQ(w.startable(), 3);
  w.start();
  const auto push = w.finish();
  ASSERT_TRUE(push);
  EXPECT_EQ(push->wave, 0);
  EXPECT_EQ(w.waiting_for(), 1);
  EXPECT_FALSE(w.startable());  // minibatch 4 waits for the pull of clock 0
  EXPECT_THROW(w.complete_pull(VersionVector(2)), Error);  // w_global must hold its own wave 0
  EXPECT_THROW(WorkerClock(0, {.num_vw = 1, .nm = 0}), Error);
}

}  // namespace
}  // namespace baton::wsp
