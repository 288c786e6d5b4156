// LossSpikeGuard: a loss above factor × the median of the recent window is a spike; a falling loss,
// a short history and factor 0 never are; a spike does not enter the window.
#include <gtest/gtest.h>

#include "train/observe/loss_spike.h"

namespace baton {
namespace {

TEST(LossSpike, AboveFactorTimesTheMedianOfTheWindow) {
  LossSpikeGuard g(10, 100);
  for (int s = 1; s <= 19; ++s) EXPECT_FALSE(g.check(s, s == 5 ? 1000.0 : 2.0)) << s;  // history too short
  // The median of 19 values (one outlier of 1000) is 2: 20.5 > 10 × 2, 19.5 is not.
  EXPECT_FALSE(g.check(20, 19.5));
  const auto spike = g.check(21, 20.5);
  ASSERT_TRUE(spike);
  EXPECT_EQ(*spike, "loss spike at step 21: 20.5 is 10.2x the median 2 of the previous 20 steps");
  EXPECT_TRUE(g.check(22, 20.5));  // the spike did not enter the window
}

TEST(LossSpike, FallingLossAndFactorZeroNeverTrip) {
  LossSpikeGuard falling(2, 10), off(0, 10);
  double loss = 10;
  for (int s = 1; s <= 200; ++s, loss *= 0.97) {
    EXPECT_FALSE(falling.check(s, loss)) << s;
    EXPECT_FALSE(off.check(s, s % 50 == 0 ? 1e12 : loss)) << s;
  }
}

TEST(LossSpike, TheWindowForgets) {
  LossSpikeGuard g(3, 10);
  for (int s = 1; s <= 10; ++s) g.check(s, 1.0);
  for (int s = 11; s <= 20; ++s) EXPECT_FALSE(g.check(s, 2.5)) << s;  // 2.5 < 3 × 1
  EXPECT_FALSE(g.check(21, 7.0));  // the window now holds ten 2.5s: 7 < 7.5
  EXPECT_TRUE(g.check(22, 8.0));
}

}  // namespace
}  // namespace baton
