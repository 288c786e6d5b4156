// phase_limit: a save, an evaluation or the start-up is bounded by 10x its last measured duration
// (at least 2 min), the first one by its size-derived bound, never above run.stall_timeout_s
// (issue 22 item 1: a save that hung waited the 1800 s default).
#include <gtest/gtest.h>

#include "train/observe/stall_watchdog.h"

namespace baton {
namespace {

TEST(StallWatchdog, PhaseLimitFromTheLastDuration) {
  EXPECT_DOUBLE_EQ(phase_limit(1800, 0.05, std::nullopt), 120);  // a tiny save: the 2 min floor
  EXPECT_DOUBLE_EQ(phase_limit(1800, 30, std::nullopt), 300);     // 10x a 30 s save
  EXPECT_DOUBLE_EQ(phase_limit(1800, 600, 200.0), 1800);           // never above the timeout
  EXPECT_DOUBLE_EQ(phase_limit(60, 30, std::nullopt), 60);         // a short run.stall_timeout_s wins
}

TEST(StallWatchdog, FirstOccurrenceUsesItsBoundOrTheTimeout) {
  EXPECT_DOUBLE_EQ(phase_limit(1800, std::nullopt, 150.0), 150);  // 1.5 GB at 10 MB/s
  EXPECT_DOUBLE_EQ(phase_limit(1800, std::nullopt, 5000.0), 1800);
  EXPECT_DOUBLE_EQ(phase_limit(1800, std::nullopt, std::nullopt), 1800);
}

}  // namespace
}  // namespace baton
