// DivergenceGuard: the ceiling sees an explosion from step 1; a jump above factor × the median of
// the recent window is a spike; a gradient-norm jump likewise; a falling loss, a short history and
// 0 (off) never trip; a flagged step enters no history; the history survives state()/restore().
#include <gtest/gtest.h>

#include "core/error.h"
#include "train/observe/divergence_guard.h"

namespace baton {
namespace {

DivergenceRules jump_only(double factor, int window) {
  return {.factor = factor, .window = window, .ceiling = 0, .norm_factor = 0};
}

TEST(DivergenceGuard, JumpAboveFactorTimesTheMedianOfTheWindow) {
  DivergenceGuard g(jump_only(10, 100));
  for (int s = 1; s <= 7; ++s) EXPECT_FALSE(g.check(s, s == 5 ? 1000.0 : 2.0, 1)) << s;  // history too short
  for (int s = 8; s <= 19; ++s) EXPECT_FALSE(g.check(s, 2.0, 1)) << s;
  // The median of 19 values (one outlier of 1000) is 2: 20.5 > 10 × 2, 19.5 is not.
  EXPECT_FALSE(g.check(20, 19.5, 1));
  const auto spike = g.check(21, 20.5, 1);
  ASSERT_TRUE(spike);
  EXPECT_EQ(*spike, "loss spike at step 21: 20.5 is 10.2x the median 2 of the previous 20 steps");
  EXPECT_TRUE(g.check(22, 20.5, 1));  // the spike did not enter the window
}

TEST(DivergenceGuard, FallingLossAndZeroNeverTrip) {
  DivergenceGuard falling({.factor = 2, .window = 10, .ceiling = 2, .norm_factor = 2, .uniform_loss = 10}),
      off({.factor = 0, .window = 10, .ceiling = 0, .norm_factor = 0, .uniform_loss = 10});
  double loss = 10;
  for (int s = 1; s <= 200; ++s, loss *= 0.97) {
    EXPECT_FALSE(falling.check(s, loss, 1 + 0.5 * (s % 3))) << s;
    EXPECT_FALSE(off.check(s, s % 50 == 0 ? 1e12 : loss, s % 50 == 0 ? 1e12 : 1)) << s;
  }
}

TEST(DivergenceGuard, TheWindowForgets) {
  DivergenceGuard g(jump_only(3, 10));
  for (int s = 1; s <= 10; ++s) g.check(s, 1.0, 1);
  for (int s = 11; s <= 20; ++s) EXPECT_FALSE(g.check(s, 2.5, 1)) << s;  // 2.5 < 3 × 1
  EXPECT_FALSE(g.check(21, 7.0, 1));  // the window now holds ten 2.5s: 7 < 7.5
  EXPECT_TRUE(g.check(22, 8.0, 1));
}

// lr 1e3 (9 -> 6.9e4 at step 2) and lr 1.0 from scratch (the quickstart: 9.07, 8.25, 14.6, 17.1,
// 32.2) are flagged at step 2 and step 5 by the ceiling, before any median exists.
TEST(DivergenceGuard, TheCeilingSeesAnExplosionFromTheFirstSteps) {
  const DivergenceRules rules{.uniform_loss = 9.0109};  // ln 8192
  DivergenceGuard a(rules);
  EXPECT_FALSE(a.check(1, 9.07, 4.1));
  const auto boom = a.check(2, 6.9e4, 4e3);
  ASSERT_TRUE(boom);
  EXPECT_EQ(*boom, "loss diverged at step 2: 6.9e+04 is 7.61e+03x the first step's loss 9.07");
  DivergenceGuard b(rules);
  const double quickstart_lr1[] = {9.0711, 8.2451, 14.5903, 17.1427, 32.2287};
  for (int s = 1; s <= 4; ++s) EXPECT_FALSE(b.check(s, quickstart_lr1[s - 1], 4)) << s;
  EXPECT_TRUE(b.check(5, quickstart_lr1[4], 5));
  // A model whose first loss is below the uniform guess is judged against the guess.
  DivergenceGuard c({.uniform_loss = 2.302585});
  EXPECT_FALSE(c.check(1, 2.1, 1));
  EXPECT_FALSE(c.check(2, 4.6, 1));
  EXPECT_EQ(*c.check(3, 4.7, 1), "loss diverged at step 3: 4.7 is 2.04x a uniform guess's loss 2.303");
}

TEST(DivergenceGuard, GradientNormSpike) {
  DivergenceGuard g({.factor = 0, .window = 100, .ceiling = 0, .norm_factor = 10});
  for (int s = 1; s <= 8; ++s) EXPECT_FALSE(g.check(s, 3, s % 2 ? 1.0 : 2.0)) << s;
  EXPECT_FALSE(g.check(9, 3, 19.9));  // the median of 1,2,1,2,... (8 values) is 2
  const auto spike = g.check(10, 3, 25);
  ASSERT_TRUE(spike);
  EXPECT_EQ(*spike, "gradient norm spike at step 10: 25 is 12.5x the median 2 of the previous 9 steps");
}

// The history a checkpoint carries: a guard restored from it flags what the original would have,
// and a fresh guard (the blind resume of before) does not.
TEST(DivergenceGuard, StateRestoresTheHistory) {
  const DivergenceRules rules = jump_only(3, 10);
  DivergenceGuard g(rules);
  for (int s = 1; s <= 10; ++s) g.check(s, 1.0 + 0.01 * s, 1);
  DivergenceGuard restored(rules), blind(rules);
  restored.restore(g.state());
  EXPECT_EQ(restored.state(), g.state());
  EXPECT_TRUE(restored.check(11, 4.0, 1));
  EXPECT_TRUE(g.check(11, 4.0, 1));
  EXPECT_FALSE(blind.check(11, 4.0, 1));
  EXPECT_THROW(restored.restore("{\"first_loss\": 1"), Error);
}

}  // namespace
}  // namespace baton
