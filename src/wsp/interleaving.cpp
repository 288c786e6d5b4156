// WSP's deterministic mode (see interleaving.h).
#include "wsp/interleaving.h"

#include <algorithm>

#include "core/error.h"
#include "core/rng.h"
#include "wsp/server_clock.h"
#include "wsp/worker_clock.h"

namespace baton::wsp {
namespace {

// A VW among those with work in flight, with probability ∝ speed.
int pick(const std::vector<WorkerClock>& workers, const std::vector<double>& speed, Rng& rng) {
  double total = 0;
  for (const WorkerClock& w : workers)
    if (w.in_flight() > 0) total += speed[w.vw()];
  BATON_ASSERT(total > 0, "WSP interleaving: every VW is waiting for the server (deadlock)");
  double x = static_cast<double>(rng.uniform()) * total;
  int last = -1;
  for (const WorkerClock& w : workers) {
    if (w.in_flight() == 0) continue;
    last = w.vw();
    x -= speed[w.vw()];
    if (x < 0) return last;
  }
  return last;  // rounding at the top end
}

}  // namespace

Interleaving interleave(const InterleavingSpec& spec) {
  check_params(spec.params);
  const int n = spec.params.num_vw;
  BATON_REQUIRE(spec.waves >= 1, fmt::format("WSP interleaving: {} waves", spec.waves), "run at least one wave");
  std::vector<double> speed = spec.speed.empty() ? std::vector<double>(n, 1.0) : spec.speed;
  BATON_REQUIRE(static_cast<int>(speed.size()) == n,
                fmt::format("WSP interleaving: {} speeds for {} virtual workers", speed.size(), n),
                "give one relative speed per virtual worker");
  for (double s : speed)
    BATON_REQUIRE(s > 0, fmt::format("WSP interleaving: speed {} is not positive", s),
                  "relative speeds are > 0");

  Interleaving out;
  ServerClock server(n, spec.params.nm, &out.trace);
  std::vector<WorkerClock> workers;
  for (int v = 0; v < n; ++v) workers.emplace_back(v, spec.params, spec.waves * spec.params.nm, &out.trace);
  auto start_all = [&] {
    for (WorkerClock& w : workers)
      while (w.startable()) w.start();
  };
  Rng rng(mix({spec.seed, 0x575350}));  // "WSP"

  start_all();
  auto all_done = [&] {
    return std::all_of(workers.begin(), workers.end(), [](const WorkerClock& w) { return w.done(); });
  };
  while (!all_done()) {
    const int v = pick(workers, speed, rng);
    out.order.push_back(v);
    if (auto push = workers[v].finish()) server.push(v, push->wave, push->update);
    for (WorkerClock& w : workers)
      if (const auto needs = w.waiting_for(); needs && server.pull_ready(*needs)) w.complete_pull(server.global());
    start_all();
  }
  return out;
}

}  // namespace baton::wsp
