// Heterogeneity on one machine (docs/hetpipe.md): the seeded stretch of a rank's compute
// (train/hetero/compute_stretch.h) and the CPU backend's memory limit (backend.h set_memory_limit).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <thread>

#include "backend/backend.h"
#include "core/error.h"
#include "core/timer.h"
#include "train/hetero/compute_stretch.h"

namespace baton {
namespace {

using ::testing::HasSubstr;

TEST(ComputeStretch, FactorIsTheSlowdownWithoutJitter) {
  const ComputeStretch s(3, 0, 1234, 1);
  for (int64_t p = 1; p <= 50; ++p) EXPECT_EQ(s.factor(p), 3.0);
  EXPECT_TRUE(s.active());
  EXPECT_FALSE(ComputeStretch(1, 0, 1234, 0).active());
}

TEST(ComputeStretch, JitterIsSeededAndInRange) {
  const ComputeStretch a(2, 0.5, 7, 1), same(2, 0.5, 7, 1), other_rank(2, 0.5, 7, 2), other_seed(2, 0.5, 8, 1);
  std::set<double> seen;
  double lo = 10, hi = 0, sum = 0;
  int differs_rank = 0, differs_seed = 0;
  const int n = 2000;
  for (int64_t p = 1; p <= n; ++p) {
    const double f = a.factor(p);
    EXPECT_EQ(f, same.factor(p)) << "the factor is a function of (seed, rank, minibatch) alone";
    EXPECT_EQ(f, a.factor(p));
    ASSERT_GE(f, 2.0);
    ASSERT_LE(f, 3.0);
    lo = std::min(lo, f), hi = std::max(hi, f), sum += f;
    seen.insert(f);
    differs_rank += f != other_rank.factor(p);
    differs_seed += f != other_seed.factor(p);
  }
  EXPECT_GT(seen.size(), size_t(n) * 9 / 10);
  EXPECT_LT(lo, 2.05);  // spread over [2, 3]: uniform, mean 2.5
  EXPECT_GT(hi, 2.95);
  EXPECT_NEAR(sum / n, 2.5, 0.03);
  EXPECT_GT(differs_rank, n * 9 / 10);
  EXPECT_GT(differs_seed, n * 9 / 10);
}

// hetero.jitter_span: one factor per episode of `span` minibatches (p = 1 … span, span + 1 … 2·span,
// …), the episodes' factors drawn like span 1's minibatches' (episode e's factor = minibatch e's at
// span 1), so span 1 is the per-minibatch jitter unchanged.
TEST(ComputeStretch, JitterSpanHoldsOneFactorPerEpisode) {
  const int span = 4;
  const ComputeStretch per_mb(2, 1, 7, 3), episodes(2, 1, 7, 3, span);
  int changes = 0;
  for (int64_t p = 1; p <= 400; ++p) {
    const int64_t e = (p - 1) / span + 1;
    ASSERT_EQ(episodes.factor(p), per_mb.factor(e)) << "minibatch " << p << " is in episode " << e;
    if (p > 1 && (p - 1) % span != 0) {
      ASSERT_EQ(episodes.factor(p), episodes.factor(p - 1)) << p;
    }
    if (p > 1 && (p - 1) % span == 0) changes += episodes.factor(p) != episodes.factor(p - 1);
  }
  EXPECT_GT(changes, 95);  // 99 episode boundaries, each a new uniform draw
  const ComputeStretch span_one(2, 1, 7, 3, 1);
  for (int64_t p = 1; p <= 50; ++p) EXPECT_EQ(span_one.factor(p), per_mb.factor(p));
  EXPECT_THROW(ComputeStretch(2, 1, 7, 3, 0), Error);
}

// hetero.jitter_scope = "vw": the factors are the VW's — the same on every rank of it, whatever its
// slowdown — and differ between VWs and from the per-rank draws.
TEST(ComputeStretch, VwScopeGivesEveryRankOfTheVwItsFactors) {
  const int span = 4;
  const ComputeStretch stage0(2, 1, 7, /*rank*/ 2, span, /*vw*/ 1), stage1(3, 1, 7, /*rank*/ 3, span, /*vw*/ 1);
  const ComputeStretch other_vw(2, 1, 7, 4, span, 2), own(2, 1, 7, 2, span);
  int differs_vw = 0, differs_rank = 0;
  for (int64_t p = 1; p <= 400; ++p) {
    ASSERT_DOUBLE_EQ(stage0.factor(p) / 2, stage1.factor(p) / 3) << "minibatch " << p << ": one jitter draw for the VW";
    ASSERT_GE(stage0.factor(p), 2.0);
    ASSERT_LE(stage0.factor(p), 4.0);
    differs_vw += stage0.factor(p) != other_vw.factor(p);
    differs_rank += stage0.factor(p) != own.factor(p);
  }
  EXPECT_GT(differs_vw, 390);
  EXPECT_GT(differs_rank, 390);
}

// hetero.jitter_probability = q: a share q of the episodes straggle — each with the factor q = 1
// draws for it (the straggle decision is a stream of its own) — the others run at the slowdown.
// Per rank and per VW alike; q outside (0, 1] is refused.
TEST(ComputeStretch, JitterProbabilitySlowsAShareOfTheEpisodes) {
  const int span = 4, episodes = 4000;
  for (const int vw : {-1, 2}) {
    const ComputeStretch always(2, 1, 7, 3, span, vw), sometimes(2, 1, 7, 3, span, vw, 0.25);
    const ComputeStretch once_more(2, 1, 7, 3, span, vw, 0.25), rarely(2, 1, 7, 3, span, vw, 0.1);
    int straggled = 0, rare = 0;
    double straggler_sum = 0;
    for (int64_t e = 1; e <= episodes; ++e) {
      const int64_t p = (e - 1) * span + 1;
      const double f = sometimes.factor(p);
      ASSERT_EQ(f, once_more.factor(p)) << "a function of (seed, key, episode) alone";
      ASSERT_EQ(f, sometimes.factor(p + span - 1)) << "one decision per episode";
      ASSERT_TRUE(f == 2.0 || f == always.factor(p)) << "episode " << e << ": a straggler keeps q = 1's factor";
      straggled += f != 2.0;
      if (f != 2.0) straggler_sum += f;
      // The decisions nest: a smaller q straggles in a subset of a larger q's episodes.
      if (rarely.factor(p) != 2.0) {
        ++rare;
        ASSERT_NE(f, 2.0) << "episode " << e;
      }
    }
    // Binomial(4000, 0.25): standard deviation 0.0068 of the share.
    EXPECT_NEAR(static_cast<double>(straggled) / episodes, 0.25, 0.03) << "vw " << vw;
    EXPECT_NEAR(static_cast<double>(rare) / episodes, 0.1, 0.02) << "vw " << vw;
    // The stragglers' factors span all of [2, 4] (mean 3; sd of the mean ~0.02), not only its low end
    // as they would if the decision reused the factor's draw.
    EXPECT_NEAR(straggler_sum / straggled, 3.0, 0.1) << "vw " << vw;
  }
  const ComputeStretch per_rank(2, 1, 7, 3, span, -1, 0.25), per_vw(2, 1, 7, 3, span, 3, 0.25);
  int differ = 0;
  for (int64_t p = 1; p <= 400 * span; p += span) differ += (per_rank.factor(p) == 2.0) != (per_vw.factor(p) == 2.0);
  EXPECT_GT(differ, 60) << "rank 3's and VW 3's decisions are different streams";  // ~37.5% of 400
  EXPECT_THROW(ComputeStretch(2, 1, 7, 3, span, -1, 0), Error);
  EXPECT_THROW(ComputeStretch(2, 1, 7, 3, span, -1, 1.5), Error);
}

TEST(ComputeStretch, SleepsTheExtraTime) {
  const ComputeStretch s(3, 0, 1, 0);
  Timer t;
  const double slept = s.stretch({.wall = 0.02, .cpu = 0.02}, 1);  // 20 ms of compute at x3: 40 ms more
  const double wall = t.seconds();
  EXPECT_GE(slept, 0.04);
  EXPECT_LT(slept, 0.04 + 0.2);  // a loaded machine may oversleep, never undersleep
  EXPECT_GE(wall, slept - 1e-3);
  EXPECT_EQ(ComputeStretch(1, 0, 1, 0).stretch({.wall = 0.5, .cpu = 0.5}, 1), 0.0);  // nothing to stretch
  EXPECT_EQ(s.stretch({}, 1), 0.0);
}

// The emulated device's time is factor × the thread's CPU seconds: a compute interval stretched by
// other ranks sharing the core (wall 50 ms for 20 ms of CPU) sleeps only up to 3 × 20 = 60 ms, and
// one stretched beyond it (wall 80 ms) not at all.
TEST(ComputeStretch, SharingTheCoreCountsTowardTheDevicesTime) {
  const ComputeStretch s(3, 0, 1, 0);
  const double slept = s.stretch({.wall = 0.05, .cpu = 0.02}, 1);
  EXPECT_GE(slept, 0.01);
  EXPECT_LT(slept, 0.01 + 0.2);
  EXPECT_EQ(s.stretch({.wall = 0.08, .cpu = 0.02}, 1), 0.0);
}

// Spinning for 30 ms of wall time uses about 30 ms of the thread's CPU; sleeping uses none.
TEST(ComputeStretch, WorkTimerMeasuresTheThreadsCpu) {
  const WorkTimer spin;
  volatile double x = 0;
  while (spin.elapsed().wall < 0.03) x = x + 1;
  const WorkTime busy = spin.elapsed();
  EXPECT_GT(busy.cpu, 0.005);  // on a loaded machine the thread may get a fraction of the core
  EXPECT_LE(busy.cpu, busy.wall + 1e-3);
  const WorkTimer nap;
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_LT(nap.elapsed().cpu, 0.01);
}

TEST(ComputeStretch, RefusesFactorsBelowOne) {
  EXPECT_THROW(ComputeStretch(0.5, 0, 1, 0), Error);
  EXPECT_THROW(ComputeStretch(1, -0.1, 1, 0), Error);
}

TEST(CpuMemoryLimit, RefusesWhatTheDeviceCouldNotHold) {
  const std::unique_ptr<Backend> be = make_cpu_backend();
  be->set_memory_limit({.bytes = size_t{1} << 20, .rank = 3, .device = "QUADRO-P4000"});
  void* a = be->alloc(600 << 10);  // 600 KiB of the 1 MiB
  try {
    be->alloc(500 << 10);
    FAIL() << "an allocation beyond the limit was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("out of memory on rank 3 (emulating QUADRO-P4000)"));
    EXPECT_THAT(e.what(), HasSubstr("allocating 500 KiB with 600 KiB in use would exceed its memory limit of 1 MiB"));
    EXPECT_THAT(e.hint(), HasSubstr("train.micro_batch"));
    EXPECT_THAT(e.hint(), HasSubstr("hetero.memory_limit"));
  }
  EXPECT_THAT(be->memory_summary(), HasSubstr("600 KiB in use of the 1 MiB limit"));
  be->release(a);  // released memory counts no more
  void* b = be->alloc(1000 << 10);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % 64, 0u);
  EXPECT_EQ(static_cast<const char*>(b)[1000 * 1024 - 1], 0);  // still zeroed
  be->release(b);
  be->release(nullptr);
}

TEST(CpuMemoryLimit, NoLimitByDefault) {
  const std::unique_ptr<Backend> be = make_cpu_backend();
  void* a = be->alloc(size_t{64} << 20);
  be->release(a);
  EXPECT_EQ(be->memory_summary(), "");
}

}  // namespace
}  // namespace baton
