// WSP's deterministic mode (issue 23 item 1, train/hetero/wsp_turns.h; docs/hetpipe.md "Deterministic
// mode"): the order of the leaders' hooks a run derives from its config — each VW's own sequence
// (F(k) after U(k − L), L = Nm for a pipelined VW, 1 for a one-stage VW), the cuts at checkpoints,
// the seed and the speeds — and that every forward a pull gates comes after the pushes it needs.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <vector>

#include "config/config.h"
#include "core/rng.h"
#include "train/hetero/wsp_turns.h"

namespace baton {
namespace {

Config wsp_config(const std::vector<std::string>& extra = {}, int ranks = 3) {
  std::vector<std::string> sets = {"hetero.sync=\"wsp\"", "hetero.staleness=1", "hetero.nm=2", "train.steps=20",
                                   "train.global_batch=12", "train.micro_batch=2", "hetero.deterministic=true"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return load_config_string("", "x", sets, ranks);
}

// Virtual workers of the given stage counts, ranks in order (a model of 6 layers).
dist::Layout vws(const std::vector<int>& stages) {
  std::vector<dist::PipelineSpec> pipes;
  std::vector<std::vector<int>> ranks;
  int next = 0;
  for (int pp : stages) {
    dist::PipelineSpec p{.pp = pp};
    std::vector<int> r;
    for (int s = 0; s < pp; ++s) {
      p.stages.push_back({s * 6 / pp, (s + 1) * 6 / pp});
      r.push_back(next++);
    }
    pipes.push_back(p);
    ranks.push_back(r);
  }
  return dist::Layout::virtual_workers(pipes, ranks);
}

double mean_position(const std::vector<Turn>& order, int vw) {
  double sum = 0;
  int n = 0;
  for (size_t i = 0; i < order.size(); ++i)
    if (order[i].vw == vw) sum += static_cast<double>(i), ++n;
  return sum / n;
}

// Each VW's hooks in its own order: F(k) after U(k − L) and before U(k − L + 1), per segment.
void expect_own_sequences(const std::vector<Turn>& order, const std::vector<int>& stages, int nm, int64_t steps,
                          int64_t every) {
  for (int v = 0; v < static_cast<int>(stages.size()); ++v) {
    const int64_t L = stages[static_cast<size_t>(v)] > 1 ? nm : 1;
    std::vector<Turn> want;
    for (int64_t a = 0; a < steps; a += every) {
      const int64_t e = std::min(a + every, steps);
      for (int64_t k = a + 1; k <= std::min(a + L, e); ++k) want.push_back({v, Turn::FORWARD, k});
      for (int64_t j = a + 1; j <= e; ++j) {
        want.push_back({v, Turn::UPDATE, j});
        if (j + L <= e) want.push_back({v, Turn::FORWARD, j + L});
      }
    }
    std::vector<Turn> got;
    for (const Turn& t : order)
      if (t.vw == v) got.push_back(t);
    EXPECT_EQ(got, want) << "VW " << v;
  }
}

TEST(WspTurns, OneStageVwsFromTheConfig) {
  const Config cfg = wsp_config();
  const std::vector<Turn> order = deterministic_turns(cfg, vws({1, 1, 1}));
  ASSERT_EQ(order.size(), 120u);
  expect_own_sequences(order, {1, 1, 1}, 2, 20, 20);
  EXPECT_EQ(deterministic_turns(cfg, vws({1, 1, 1})), order);  // a function of the config
  EXPECT_NE(deterministic_turns(wsp_config({"train.seed=7"}), vws({1, 1, 1})), order);
  // A slower VW (hetero.slowdown) takes its turns later on average.
  const std::vector<Turn> slow =
      deterministic_turns(wsp_config({"hetero.slowdown=[1, 3, 1]", "hetero.staleness=4"}), vws({1, 1, 1}));
  EXPECT_GT(mean_position(slow, 1), mean_position(slow, 0));
  EXPECT_GT(mean_position(slow, 1), mean_position(slow, 2));
}

TEST(WspTurns, PipelinedVwsAndCheckpointCuts) {
  const Config cfg = wsp_config({"hetero.nm=3", "train.steps=18", "checkpoint.every=6"}, 6);
  const std::vector<Turn> order = deterministic_turns(cfg, vws({1, 2, 3}));
  ASSERT_EQ(order.size(), 108u);
  expect_own_sequences(order, {1, 2, 3}, 3, 18, 6);
  // Every VW's hooks of a segment come before any of the next segment's (all VWs meet there).
  int64_t segment = 0;
  for (const Turn& t : order) {
    const int64_t s = (t.minibatch - 1) / 6;
    EXPECT_GE(s, segment);
    segment = std::max(segment, s);
  }
  // A slowdown on one rank of VW 2 slows the whole VW.
  const std::vector<Turn> slow = deterministic_turns(
      wsp_config({"hetero.nm=3", "train.steps=18", "hetero.slowdown=[1, 1, 1, 1, 1, 4]", "hetero.staleness=3"}, 6),
      vws({1, 2, 3}));
  EXPECT_GT(mean_position(slow, 2), mean_position(slow, 0));
}

// The rule, replayed from the order by hand (not through wsp::WorkerClock): every forward of
// minibatch (c+2)·Nm comes after every VW pushed wave c − D (U((c − D + 1)·Nm)).
TEST(WspTurns, GatedForwardsFollowThePushesTheyNeed) {
  Rng rng(mix({2026, 23, 1}));
  int gated = 0;
  for (int run = 0; run < 60; ++run) {
    const int n = 2 + static_cast<int>(rng.uniform() * 2), nm = 1 + static_cast<int>(rng.uniform() * 3);
    const int d = static_cast<int>(rng.uniform() * 3), waves = 2 + static_cast<int>(rng.uniform() * 4);
    std::vector<int> stages;
    int ranks = 0;
    for (int v = 0; v < n; ++v) stages.push_back(1 + static_cast<int>(rng.uniform() * 3)), ranks += stages.back();
    const Config cfg = wsp_config({fmt::format("hetero.nm={}", nm), fmt::format("hetero.staleness={}", d),
                                   fmt::format("train.steps={}", waves * nm), fmt::format("train.seed={}", run),
                                   fmt::format("train.global_batch={}", 2 * ranks)},
                                  ranks);
    const std::vector<Turn> order = deterministic_turns(cfg, vws(stages));
    std::map<std::pair<int, int64_t>, size_t> at;  // (vw, U minibatch) → position
    for (size_t i = 0; i < order.size(); ++i)
      if (order[i].hook == Turn::UPDATE) at[{order[i].vw, order[i].minibatch}] = i;
    for (size_t i = 0; i < order.size(); ++i) {
      const Turn& t = order[i];
      if (t.hook != Turn::FORWARD || t.minibatch % nm != 0) continue;
      const int64_t c = t.minibatch / nm - 2;
      if (c < d) continue;
      ++gated;
      for (int v = 0; v < n; ++v) {
        const size_t p = at.at({v, (c - d + 1) * nm});
        ASSERT_LT(p, i) << "run " << run << ": VW " << t.vw << " forwards " << t.minibatch << " before VW " << v
                        << " pushed wave " << c - d;
      }
    }
  }
  EXPECT_GT(gated, 50) << "the orders should hold many gated forwards";
}

}  // namespace
}  // namespace baton
