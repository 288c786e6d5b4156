// WSP's deterministic mode (issue 13 item 7, train/hetero/wsp_turns.h; docs/hetpipe.md "Deterministic
// mode"): the order of turns a run derives from its config, and the claim the serialized one-rank
// loop stands on — replaying wsp::interleave's order with VWs that run one minibatch per turn, a
// pull that gates a VW's minibatch is always satisfiable by the pushes of the turns before it.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "config/config.h"
#include "core/rng.h"
#include "train/hetero/wsp_turns.h"
#include "wsp/interleaving.h"
#include "wsp/server_clock.h"
#include "wsp/worker_clock.h"

namespace baton {
namespace {

Config wsp_config(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> sets = {"hetero.sync=\"wsp\"", "hetero.staleness=1", "hetero.nm=2", "train.steps=20",
                                   "train.global_batch=12", "train.micro_batch=2", "hetero.deterministic=true"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return load_config_string("", "x", sets, 3);
}

// Three virtual workers of one rank each (the layout a config with no hetero.virtual_workers gets).
const dist::Layout& three_vws() {
  static const dist::Layout l = dist::Layout::virtual_workers(
      std::vector<dist::PipelineSpec>(3, dist::PipelineSpec{.pp = 1, .stages = {{0, 4}}}), {{0}, {1}, {2}});
  return l;
}

double mean_position(const std::vector<int>& order, int vw) {
  double sum = 0;
  int n = 0;
  for (size_t i = 0; i < order.size(); ++i)
    if (order[i] == vw) sum += static_cast<double>(i), ++n;
  return sum / n;
}

TEST(WspTurns, OrderFromTheConfig) {
  const Config cfg = wsp_config();
  const std::vector<int> order = deterministic_turns(cfg, three_vws());
  ASSERT_EQ(order.size(), 60u);
  for (int v = 0; v < 3; ++v) EXPECT_EQ(std::count(order.begin(), order.end(), v), 20) << v;
  // The interleaving of the run's parameters, waves and seed, at equal speeds.
  const wsp::Interleaving direct = wsp::interleave(
      {.params = {.num_vw = 3, .nm = 2, .staleness = 1}, .waves = 10, .speed = {}, .seed = cfg.train.seed});
  EXPECT_EQ(order, direct.order);
  EXPECT_EQ(deterministic_turns(cfg, three_vws()), order);  // a function of the config

  // Another seed, another order; a slower VW (hetero.slowdown) takes its turns later on average.
  EXPECT_NE(deterministic_turns(wsp_config({"train.seed=7"}), three_vws()), order);
  const std::vector<int> slow = deterministic_turns(wsp_config({"hetero.slowdown=[1, 3, 1]", "hetero.staleness=4"}),
                                                    three_vws());
  EXPECT_GT(mean_position(slow, 1), mean_position(slow, 0));
  EXPECT_GT(mean_position(slow, 1), mean_position(slow, 2));
}

// One-rank VWs serialized by turns, on the protocol's clocks: each turn runs the VW's next minibatch
// whole (pull if allowed, start, finish, push); a pull that gates it must be allowed already.
TEST(WspTurns, GatingPullsAreSatisfiableInTurnOrder) {
  Rng rng(mix({2026, 13, 7}));
  int gated = 0;
  for (int run = 0; run < 300; ++run) {
    const int n = 1 + static_cast<int>(rng.uniform() * 4), nm = 1 + static_cast<int>(rng.uniform() * 4);
    const int d = static_cast<int>(rng.uniform() * 5), waves = 1 + static_cast<int>(rng.uniform() * 8);
    std::vector<double> speed(static_cast<size_t>(n));
    for (double& s : speed) s = 0.25 + 3.75 * static_cast<double>(rng.uniform());
    const wsp::WspParams params{.num_vw = n, .nm = nm, .staleness = d};
    const std::vector<int> order =
        wsp::interleave({.params = params, .waves = waves, .speed = speed, .seed = static_cast<uint64_t>(run)}).order;
    wsp::ServerClock server(n, nm);
    std::vector<wsp::WorkerClock> vws;
    for (int v = 0; v < n; ++v) vws.emplace_back(v, params, waves * nm);
    for (size_t turn = 0; turn < order.size(); ++turn) {
      wsp::WorkerClock& w = vws[static_cast<size_t>(order[turn])];
      if (const std::optional<int> needs = w.waiting_for()) {
        const bool gating = !w.startable();
        ASSERT_TRUE(server.pull_ready(*needs) || !gating)
            << "run " << run << " turn " << turn << ": N=" << n << " Nm=" << nm << " D=" << d;
        if (server.pull_ready(*needs)) {
          w.complete_pull(server.global());
          gated += gating;
        }
      }
      ASSERT_TRUE(w.startable()) << "run " << run << " turn " << turn;
      w.start();
      if (const std::optional<wsp::WorkerClock::Push> push = w.finish()) server.push(w.vw(), push->wave, push->update);
    }
    for (const wsp::WorkerClock& w : vws) EXPECT_TRUE(w.done());
    EXPECT_EQ(server.c_global(), waves);
  }
  EXPECT_GT(gated, 100) << "the runs should include many pulls that gate a minibatch";
}

}  // namespace
}  // namespace baton
