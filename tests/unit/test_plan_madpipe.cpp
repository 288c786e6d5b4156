// MadPipe (notes-hetpipe-madpipe §C): 1F1B* groups on the notes' examples, the DP equal to an
// exhaustive enumeration of allocations under the same discretisation, MadPipe-DP(T̂)
// non-increasing in T̂, the searched period non-increasing in memory.
#include <gtest/gtest.h>

#include <limits>
#include <random>

#include "core/error.h"
#include "plan/madpipe.h"
#include "plan/one_f_one_b_star.h"

namespace baton::plan {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(PlanMadPipe, OneFOneBStarGroups) {
  // Notes §D.4: loads (4,4,4,4) with T = 8 give {s3,s4} -> g = 1 and {s1,s2} -> g = 2.
  EXPECT_EQ(one_f_one_b_star_groups({4, 4, 4, 4}, 8), (std::vector<int>{2, 2, 1, 1}));
  EXPECT_EQ(one_f_one_b_star_groups({4, 4, 4, 4}, 4), (std::vector<int>{4, 3, 2, 1}));  // = 1F1B
  EXPECT_EQ(one_f_one_b_star_groups({4, 4, 4, 4}, 16), (std::vector<int>{1, 1, 1, 1}));
  EXPECT_EQ(one_f_one_b_star_groups({1, 3, 2, 2}, 4), (std::vector<int>{2, 2, 1, 1}));
  EXPECT_EQ(one_f_one_b_star_groups({3, 2, 2, 2}, 4), (std::vector<int>{3, 2, 1, 1}));
  // With communication the cuts are resources: P stages -> up to 2P − 1 activations.
  EXPECT_EQ(one_f_one_b_star_activations({2, 2}, {1}, 3), (std::vector<int>{2, 1}));
  EXPECT_EQ(one_f_one_b_star_activations({2, 2, 2}, {2, 2}, 2), (std::vector<int>{5, 3, 1}));
  EXPECT_THROW(one_f_one_b_star_groups({5, 1}, 4), Error);
}

MpProblem random_problem(std::mt19937& rng, int L, int P) {
  std::uniform_real_distribution<double> u(0.2, 1.0);
  MpProblem pb;
  for (int l = 0; l < L; ++l) pb.layers.push_back({u(rng), 0.3 * u(rng), 0.5 * u(rng)});
  pb.input_bytes = 0.5 * u(rng);
  pb.P = P;
  pb.memory = 1.5 + 3 * u(rng);
  pb.beta = 2 + 4 * u(rng);
  pb.grid_m = 6;  // coarser grids keep the enumeration small; the rules are the same
  pb.grid_v = 9;
  pb.grid_t = 11;
  return pb;
}

// Exhaustive: every allocation (stages from the end, each on a new normal GPU or the special
// one), evaluated with the DP's transitions and roundings, no sharing of sub-results.
double brute_force(const MpProblem& pb, double T) {
  const MpModel md(pb);
  std::function<double(int, int, double, double, double)> go = [&](int l, int p, double tP, double mP,
                                                                    double V) -> double {
    if (l == 0) return tP;
    if (p == 0) {
      const int g = std::max(MpModel::groups(V + md.U(1, l), T) - 1, 0);
      return mP + md.mem(1, l, g) <= pb.memory * (1 + 1e-9) ? md.U(1, l) + tP : kInf;
    }
    double best = kInf;
    for (int k = 1; k <= l; ++k) {
      const double Ukl = md.U(k, l);
      const int g = MpModel::groups(V + Ukl, T);
      const double V2 = md.v_of(md.up_v(MpModel::oplus(MpModel::oplus(V, Ukl, T), md.C(k - 1), T)));
      if (md.mem(k, l, g) <= pb.memory * (1 + 1e-9))
        best = std::min(best, std::max({Ukl, md.C(k - 1), go(k - 1, p - 1, tP, mP, V2)}));
      const int mi = md.up_m(mP + md.mem(k, l, std::max(g - 1, 0)));
      if (mi < pb.grid_m) {
        const double t2 = md.t_of(md.up_t(tP + Ukl));
        best = std::min(best, std::max({t2, md.C(k - 1), go(k - 1, p, t2, md.m_of(mi), V2)}));
      }
    }
    return best;
  };
  return go(md.L(), pb.P - 1, 0, 0, 0);
}

TEST(PlanMadPipe, DpEqualsBruteForceUnderDiscretisation) {
  std::mt19937 rng(3);
  int feasible = 0;
  for (int trial = 0; trial < 120; ++trial) {
    const MpProblem pb = random_problem(rng, 3 + trial % 4, 2 + trial % 3);
    const MpModel md(pb);
    const double T = md.U(1, md.L()) / pb.P * (1 + 0.25 * (trial % 5));
    const MpPlan plan = madpipe_dp(pb, T);
    const double bf = brute_force(pb, T);
    if (bf == kInf) {
      EXPECT_FALSE(plan.feasible) << trial;
      continue;
    }
    ++feasible;
    ASSERT_TRUE(plan.feasible) << trial;
    EXPECT_NEAR(plan.period, bf, 1e-12) << trial;
    // The stages cover the chain; at most P − 1 normal ones, each within memory.
    int next = 1, normal = 0;
    for (const auto& s : plan.stages) {
      EXPECT_EQ(s.first, next);
      next = s.last + 1;
      if (!s.special) {
        ++normal;
        EXPECT_LE(md.mem(s.first, s.last, s.activations), pb.memory * (1 + 1e-9));
      }
    }
    EXPECT_EQ(next, md.L() + 1);
    EXPECT_LE(normal, pb.P - 1);
  }
  EXPECT_GT(feasible, 40);
}

// MadPipe-DP(T̂) is non-increasing in T̂ (the property Algorithm 1's bisection relies on), with
// the paper's 11/51/101 grids.
TEST(PlanMadPipe, DpNonIncreasingInTarget) {
  std::mt19937 rng(9);
  int violations = 0, checks = 0;
  for (int trial = 0; trial < 30; ++trial) {
    MpProblem pb = random_problem(rng, 6, 3);
    pb.grid_m = 11, pb.grid_v = 51, pb.grid_t = 101;
    const MpModel md(pb);
    double prev = kInf;
    for (int i = 0; i <= 12; ++i) {
      const double T = md.U(1, md.L()) / pb.P * (1 + 0.125 * i);
      const double v = madpipe_dp(pb, T).period;
      ++checks;
      if (v > prev * (1 + 1e-9)) ++violations;
      prev = v;
    }
  }
  EXPECT_EQ(violations, 0) << "of " << checks;
}

// The period found by Algorithm 1 does not get worse with more memory, and Algorithm 1's answer
// is no worse than its starting point.
TEST(PlanMadPipe, SearchNonIncreasingInMemory) {
  std::mt19937 rng(21);
  for (int trial = 0; trial < 10; ++trial) {
    MpProblem pb = random_problem(rng, 6, 3);
    pb.grid_m = 11, pb.grid_v = 51, pb.grid_t = 101;
    double prev = kInf;
    for (double M : {1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 10.0}) {
      pb.memory = M;
      const MpPlan p = madpipe_search(pb);
      const double v = p.feasible ? p.period : kInf;
      EXPECT_LE(v, prev * (1 + 1e-9)) << "trial " << trial << " M " << M;
      prev = std::min(prev, v);
    }
  }
}

// ---- Phase 2 replaced by the simulator (madpipe_check, docs/planner.md) ----

// With ample memory the checked schedule is MadPipe's 1F1B* at the phase-1 period: the simulated
// period confirms phase 1 (never above it, never below the busiest resource), every stage stores
// exactly its 1F1B* group index of activations (§C.2 step 4), and the memory per GPU is ℳ with
// those counts — the special GPU summing its stages (§C.3's all-forwards-first bound).
TEST(PlanMadPipe, CheckConfirmsThePhase1Period) {
  std::mt19937 rng(21);
  int with_special = 0;
  for (int trial = 0; trial < 40; ++trial) {
    MpProblem pb = random_problem(rng, 5 + trial % 4, 2 + trial % 3);
    pb.memory = 100;  // nothing binds
    const MpPlan plan = madpipe_search(pb);
    ASSERT_TRUE(plan.feasible);
    const MpCheck c = madpipe_check(pb, plan);
    ASSERT_TRUE(c.fits) << trial;
    const MpModel md(pb);
    const int N = plan.stages.size();
    std::vector<double> U, cut;
    double busiest = 0, special = 0;
    for (int s = 0; s < N; ++s) {
      U.push_back(md.U(plan.stages[s].first, plan.stages[s].last));
      if (s + 1 < N) cut.push_back(md.C(plan.stages[s].last));
      busiest = std::max(busiest, U.back());
      if (plan.stages[s].special) special += U.back();
    }
    for (double x : cut) busiest = std::max(busiest, x);
    with_special += special > 0;
    EXPECT_EQ(c.schedule_T, std::max(plan.period, busiest));
    EXPECT_LE(c.period, plan.period * (1 + 1e-9)) << trial;
    EXPECT_GE(c.period, std::max(busiest, special) * (1 - 1e-9)) << trial;
    EXPECT_DOUBLE_EQ(c.special_load, special);
    EXPECT_EQ(c.activations, one_f_one_b_star_activations(U, cut, c.schedule_T)) << trial;
    std::vector<double> gpu(c.gpu_memory.size(), 0.0);
    for (int s = 0; s < N; ++s)
      gpu[c.gpu_of_stage[s]] += md.mem(plan.stages[s].first, plan.stages[s].last, c.activations[s]);
    EXPECT_EQ(gpu, c.gpu_memory);
  }
  EXPECT_GT(with_special, 0);
}

// Tight memory: phase 1 under-estimates the special GPU, so some plans do not fit at the phase-1
// period; the check then raises the schedule's T (fewer stored activations) until they fit, and a
// plan it reports as fitting has every GPU within M. A larger T never stores more activations.
TEST(PlanMadPipe, CheckAdjustsThePeriodUnderTightMemory) {
  std::mt19937 rng(8);
  int adjusted = 0, fitting = 0, infeasible = 0;
  for (int trial = 0; trial < 150; ++trial) {
    MpProblem pb = random_problem(rng, 5 + trial % 4, 2 + trial % 3);
    pb.layers[0].out_bytes *= 4;  // large early activations, as in CNNs (§C.5)
    const MpPlan plan = madpipe_search(pb);
    if (!plan.feasible) continue;
    const MpCheck c = madpipe_check(pb, plan);
    if (!c.fits) {
      ++infeasible;
      continue;
    }
    ++fitting;
    for (double m : c.gpu_memory) EXPECT_LE(m, pb.memory * (1 + 1e-9));
    if (c.schedule_T > plan.period * (1 + 1e-9)) {
      ++adjusted;
      EXPECT_GE(c.period, plan.period * (1 - 1e-9));
    }
  }
  EXPECT_GT(fitting, 20);
  EXPECT_GT(adjusted, 0);
  // Monotone: raising T never stores more.
  for (double T : {3.0, 4.0, 6.0, 9.0}) {
    const auto lo = one_f_one_b_star_activations({2, 3, 1, 2}, {1, 0.5, 1}, T);
    const auto hi = one_f_one_b_star_activations({2, 3, 1, 2}, {1, 0.5, 1}, T + 1);
    for (int s = 0; s < 4; ++s) EXPECT_LE(hi[s], lo[s]);
  }
  std::printf("tight memory: %d fit, %d adjusted, %d infeasible after the check\n", fitting, adjusted,
              infeasible);
}

}  // namespace
}  // namespace baton::plan
