// simulate: bubble fractions against the papers' formulas, peak activations and weight versions,
// no flush bubble for pipedream / 2bw, deadlock detection, and the Chrome trace.
#include <gtest/gtest.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "pipeline/lower.h"
#include "pipeline/schedules.h"
#include "pipeline/simulate.h"
#include "pipeline/text.h"
#include "pipeline/trace.h"

namespace baton::pipeline {
namespace {

SimResult run(const ScheduleSpec& s, double F, double B, std::optional<double> W = {}) {
  const Program p = lower(generate(s));
  return simulate(p, Costs::uniform(p, F, B, W));
}

// notes-dissertation §1.2 / §1.5: with t_f = t_b the bubble is (p − 1)/m of the ideal time for
// GPipe and PipeDream-Flush; GPipe stashes m activations on every stage, 1F1B at most p.
TEST(PipelineSimulate, GpipeAnd1f1bBubbleIsPMinus1OverM) {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 32; ++m) {
      for (const std::string kind : {"gpipe", "1f1b"}) {
        const SimResult r = run({.kind = kind, .pp = p, .microbatches = m}, 1, 1);
        EXPECT_NEAR(r.bubble_fraction, double(p - 1) / m, 1e-12) << kind << " p " << p << " m " << m;
        EXPECT_DOUBLE_EQ(r.ideal, 2.0 * m);  // M × (F + B)
        for (int s = 0; s < p; ++s) {
          const int want = kind == "gpipe" ? m : std::min(p - s, m);  // 1f1b: ≤ p
          EXPECT_EQ(r.peak_activations[s], want);
          EXPECT_EQ(r.peak_weight_versions[s], 1);
        }
      }
    }
  // Unequal costs (the CLI default F = 1, B = 2): bubble time (p − 1)(F + B), same fraction.
  const SimResult r = run({.kind = "1f1b", .pp = 4, .microbatches = 8}, 1, 2);
  EXPECT_DOUBLE_EQ(r.makespan, (8 + 3) * 3.0);
  EXPECT_NEAR(r.bubble_fraction, 3.0 / 8, 1e-12);
}

// notes-dissertation §1.6: the interleaved bubble is (1/v)·(p − 1)/m with chunk costs t/v.
TEST(PipelineSimulate, InterleavedBubbleIsPMinus1OverVM) {
  for (int p = 1; p <= 8; ++p)
    for (int v = 1; v <= 4; ++v)
      for (int m = p; m <= 32; m += p) {
        const SimResult r = run({.kind = "interleaved", .pp = p, .vp = v, .microbatches = m}, 1, 1);
        EXPECT_NEAR(r.bubble_fraction, double(p - 1) / (v * m), 1e-9)
            << "p " << p << " v " << v << " m " << m;
        EXPECT_NEAR(r.ideal, 2.0 * m, 1e-9);
      }
}

// Zero bubble H1 with F = B = W: bubble (p − 1)(F + B − W) = (p − 1)·F against an ideal 3m·F,
// i.e. (p − 1)/(3m), a third of 1F1B's, with the peak activations of 1F1B (p) on every rank.
TEST(PipelineSimulate, ZeroBubbleH1IsAThirdOf1f1b) {
  for (int p = 1; p <= 8; ++p)
    for (int m = p; m <= 32; ++m) {
      const SimResult z = run({.kind = "zb-h1", .pp = p, .microbatches = m}, 1, 1, 1.0);
      EXPECT_NEAR(z.bubble_fraction, double(p - 1) / (3 * m), 1e-12) << "p " << p << " m " << m;
      const SimResult f = run({.kind = "1f1b", .pp = p, .microbatches = m}, 1, 1, 1.0);
      EXPECT_NEAR(f.bubble_fraction, double(p - 1) / m, 1e-12);
      for (int s = 0; s < p; ++s) EXPECT_LE(z.peak_activations[s], p);
      EXPECT_EQ(*std::max_element(z.peak_activations.begin(), z.peak_activations.end()),
                *std::max_element(f.peak_activations.begin(), f.peak_activations.end()));
    }
}

// No flush: 2bw over several batches and pipedream pay the pipeline fill and drain once,
// (p − 1)(F + B) in all, while 1F1B pays it every step; between the first backward and the last
// forward of each rank (the steady state) no rank is ever idle.
TEST(PipelineSimulate, PipedreamAnd2bwHaveNoFlushBubble) {
  for (int p = 1; p <= 6; ++p)
    for (int m : {p, 2 * p, 3 * p + 1})
      for (int steps : {1, 2, 4}) {
        const double F = 1, B = 2;
        const SimResult bw = run({.kind = "2bw", .pp = p, .microbatches = m, .steps = steps}, F, B);
        const SimResult pd = run({.kind = "pipedream", .pp = p, .microbatches = m, .steps = steps}, F, B);
        const SimResult fl = run({.kind = "1f1b", .pp = p, .microbatches = m, .steps = steps}, F, B);
        EXPECT_DOUBLE_EQ(bw.makespan, (steps * m + p - 1) * (F + B));
        EXPECT_DOUBLE_EQ(pd.makespan, (steps * m + p - 1) * (F + B));
        EXPECT_DOUBLE_EQ(fl.makespan, steps * (m + p - 1) * (F + B));
        if (steps >= 2 && p >= 2) {
          EXPECT_GE(bw.peak_weight_versions[0], 2);
        }
        for (int s = 0; s < p; ++s) {
          EXPECT_LE(bw.peak_weight_versions[s], 2);  // 2BW: (2, p) in Table 7.1
          if (steps * m >= 2 * p) {  // steady state reached: versions no longer clamped at 0
            EXPECT_EQ(pd.peak_weight_versions[s], p - s);  // (p, p)
          }
        }
      }
  // Steady state: on every rank of a 4-stage pipedream run, no gap between ops from the first
  // backward to the last forward.
  const Program p = lower(generate({.kind = "pipedream", .pp = 4, .microbatches = 24}));
  const SimResult r = simulate(p, Costs::uniform(p, 1, 2));
  for (size_t rank = 0; rank < p.ranks.size(); ++rank) {
    double last_end = -1;
    size_t first_b = 0, last_f = 0;
    for (size_t i = 0; i < p.ranks[rank].size(); ++i) {
      if (p.ranks[rank][i].op == Op::BWD && !first_b) first_b = i;
      if (p.ranks[rank][i].op == Op::FWD) last_f = i;
    }
    for (size_t i = first_b; i <= last_f; ++i) {
      if (!is_compute(p.ranks[rank][i].op)) continue;
      if (last_end >= 0) {
        EXPECT_DOUBLE_EQ(r.start[rank][i], last_end) << "rank " << rank << " op " << i;
      }
      last_end = r.end[rank][i];
    }
  }
}

// PipeDream Fig. 8, config 2-1: stage 0 takes 2 units per pass on each of two replicas, stage 1
// takes 1 unit on one worker: the replicated pipeline keeps the single worker of stage 1 busy
// (idle only while filling and draining), with round-robin replicas and pairwise reductions.
TEST(PipelineSimulate, ReplicatedStagesBalanceTheSlowStage) {
  const Program p = lower(generate({.kind = "pipedream", .pp = 2, .microbatches = 40, .replicas = {2, 1}}));
  Costs c;
  c.stage = {{.f = 2, .b = 1, .w = 1}, {.f = 1, .b = 0.5, .w = 0.5}};
  const SimResult r = simulate(p, c);
  EXPECT_DOUBLE_EQ(r.busy[2], 40 * 2.0);
  EXPECT_DOUBLE_EQ(r.busy[0], 20 * 4.0);
  EXPECT_LT(r.makespan, 40 * 2.0 * 1.1);  // ≈ the one-worker stage's work, not 40 × 4 / 1
}

TEST(PipelineSimulate, SendLatencyIsOnTheCriticalPath) {
  const Program p = lower(generate({.kind = "gpipe", .pp = 3, .microbatches = 4}));
  const SimResult r0 = simulate(p, Costs::uniform(p, 1, 1, {}, 0));
  const SimResult r1 = simulate(p, Costs::uniform(p, 1, 1, {}, 0.5));
  // GPipe's critical path crosses p − 1 activation sends and p − 1 gradient sends.
  EXPECT_DOUBLE_EQ(r1.makespan - r0.makespan, 2 * 2 * 0.5);
}

TEST(PipelineSimulate, DetectsDeadlock) {
  // Both ranks receive before they send: each waits for the other.
  Program p = parse_program(
      "program kind=gpipe pp=2 vp=1 microbatches=1 steps=1 lowered=1\n"
      "rank 0: 0RECV_GRAD0s0p1 0F0s0 0SEND_ACT0s0p1 0B0s0 0REDUCE_GRADS 0OPT_STEPv1\n"
      "rank 1: 1RECV_ACT0s0p0 1F0s0 1B0s0 1SEND_GRAD0s0p0 1REDUCE_GRADS 1OPT_STEPv1\n");
  try {
    simulate(p, Costs::uniform(p, 1, 1));
    FAIL() << "no deadlock reported";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("deadlock"), std::string::npos) << what;
    EXPECT_NE(what.find("rank 0 waits at instruction 0 `0RECV_GRAD0s0p1`"), std::string::npos) << what;
    EXPECT_NE(what.find("rank 1 waits at instruction 0 `1RECV_ACT0s0p0`"), std::string::npos) << what;
  }
  // A receive whose send does not exist at all.
  Program q = lower(generate({.kind = "1f1b", .pp = 2, .microbatches = 2}));
  q.ranks[0].erase(std::find_if(q.ranks[0].begin(), q.ranks[0].end(),
                                [](const Instr& i) { return i.op == Op::SEND_ACT; }));  // drop 0SEND_ACT0
  EXPECT_THROW(simulate(q, Costs::uniform(q, 1, 1)), Error);
  EXPECT_THROW(simulate(generate({.kind = "1f1b", .pp = 2, .microbatches = 2}), Costs{}), Error);
}

TEST(PipelineTrace, ChromeTraceIsValidJson) {
  const Program p = lower(generate({.kind = "interleaved", .pp = 2, .vp = 2, .microbatches = 4}));
  const SimResult r = simulate(p, Costs::uniform(p, 1, 2, {}, 0.25));
  const auto j = nlohmann::json::parse(chrome_trace(p, r));
  ASSERT_TRUE(j.contains("traceEvents"));
  int compute = 0;
  double max_end = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] != "X") continue;
    EXPECT_GE(e["pid"].get<int>(), 0);
    EXPECT_LT(e["pid"].get<int>(), 2);
    if (e["tid"] == 0) ++compute;
    max_end = std::max(max_end, e["ts"].get<double>() + e["dur"].get<double>());
  }
  EXPECT_EQ(compute, 2 * 2 * 2 * 4);  // F and B of 4 stages × 4 microbatches
  EXPECT_NEAR(max_end, r.makespan * 1000, 1e-6);
}

// ---- 1F1B* (MadPipe, notes-hetpipe-madpipe §C.2) ----

// Steady-state period of a 1f1b-star program: how much the makespan grows per extra microbatch.
// Per-stage forward f and backward b (U = f + b), one-way message latency `send` on every cut.
struct StarRun {
  double period = 0;
  std::vector<int> peaks;
};
StarRun star(const std::vector<int>& in_flight, const std::vector<StageCost>& cost, double send = 0) {
  const int pp = static_cast<int>(in_flight.size());
  auto makespan = [&](int m, std::vector<int>* peaks) {
    const Program p = lower(generate_1f1b_star({.kind = "1f1b-star", .pp = pp, .microbatches = m}, in_flight));
    Costs c;
    c.stage = cost;
    c.send_act.assign(pp, send);
    c.send_grad.assign(pp, send);
    const SimResult r = simulate(p, c);
    if (peaks) *peaks = r.peak_activations;
    return r.makespan;
  };
  const int m1 = 8 * pp + 8, m2 = 2 * m1;
  StarRun out;
  const double a = makespan(m1, &out.peaks);
  out.period = (makespan(m2, nullptr) - a) / (m2 - m1);
  return out;
}

// §C.2 / §D.4: stage loads (4, 4, 4, 4). At T = 8 the groups are {s2, s3} → 1 and {s0, s1} → 2:
// the simulated schedule runs at exactly period 8 storing (2, 2, 1, 1) activations; at T = 4
// (every stage its own group) it is 1F1B, period 4 with (4, 3, 2, 1). Proposition 1: one
// activation fewer on stage 1 than 1F1B* stores cannot keep period 8 (its round trip F1 F2 F3 B3
// B2 B1 = 12 then runs unpipelined).
TEST(PipelineSimulate, OneFOneBStarPeriodAndActivations) {
  const std::vector<StageCost> equal(4, StageCost{1, 3, 0});  // U = 4
  StarRun r = star(one_f_one_b_star_in_flight({4, 4, 4, 4}, {}, 8), equal);
  EXPECT_NEAR(r.period, 8, 1e-9);
  EXPECT_EQ(r.peaks, (std::vector<int>{2, 2, 1, 1}));
  r = star(one_f_one_b_star_in_flight({4, 4, 4, 4}, {}, 4), equal);
  EXPECT_NEAR(r.period, 4, 1e-9);
  EXPECT_EQ(r.peaks, (std::vector<int>{4, 3, 2, 1}));
  r = star({2, 1, 1, 1}, equal);
  EXPECT_NEAR(r.period, 12, 1e-9);
  // Unequal loads (1, 3, 2, 2), T = 4: groups {s2, s3}, {s0, s1}; period 4 = T, (2, 2, 1, 1).
  const std::vector<StageCost> uneven = {{0.25, 0.75, 0}, {1, 2, 0}, {0.5, 1.5, 0}, {0.5, 1.5, 0}};
  r = star(one_f_one_b_star_in_flight({1, 3, 2, 2}, {}, 4), uneven);
  EXPECT_NEAR(r.period, 4, 1e-9);
  EXPECT_EQ(r.peaks, (std::vector<int>{2, 2, 1, 1}));
  r = star({2, 1, 1, 1}, uneven);
  EXPECT_GT(r.period, 4 + 1e-6);
}

// With communication (§C.2 step 6): two stages of load 2 and a cut of load C = 2a/β = 1 (0.5 each
// way). At T = 3 the cut joins the last stage's group and stage 0 stores 2 activations: the
// simulated period is within T (the round trip 2 + 0.5 + 2 + 0.5 = 5 over 2 in flight = 2.5),
// while storing 1 would need period 5 > T.
TEST(PipelineSimulate, OneFOneBStarWithCommunication) {
  const std::vector<StageCost> cost(2, StageCost{0.5, 1.5, 0});
  const std::vector<int> g = one_f_one_b_star_in_flight({2, 2}, {1}, 3);
  ASSERT_EQ(g, (std::vector<int>{2, 1}));
  StarRun r = star(g, cost, 0.5);
  EXPECT_LE(r.period, 3 + 1e-9);
  EXPECT_NEAR(r.period, 2.5, 1e-9);
  EXPECT_EQ(r.peaks, g);
  r = star({1, 1}, cost, 0.5);
  EXPECT_NEAR(r.period, 5, 1e-9);
}

}  // namespace
}  // namespace baton::pipeline
