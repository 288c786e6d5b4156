// phase_limit: a save, an evaluation or the start-up is bounded by 10x its last measured duration
// (at least 2 min), the first one by its size-derived bound, never above run.stall_timeout_s
// (issue 22 item 1: a save that hung waited the 1800 s default).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

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

// The start-up: the previous run's in the same run.dir bounds it; rank 0 records this one's at the
// first step. A run.dir without the file keeps run.stall_timeout_s.
TEST(StallWatchdog, StartupBoundFromThePreviousRun) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "baton-watchdog-startup";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  {
    StallWatchdog fresh(1800, dir.string(), 0, 1);
    EXPECT_DOUBLE_EQ(fresh.limit(), 1800);
    fresh.step_done(1, 0.01);
  }
  double recorded = -1;
  std::ifstream(dir / ".startup-seconds") >> recorded;
  EXPECT_GE(recorded, 0);
  EXPECT_LT(recorded, 60);
  std::ofstream(dir / ".startup-seconds") << "30\n";
  {
    StallWatchdog resumed(1800, dir.string(), 0, 1);
    EXPECT_DOUBLE_EQ(resumed.limit(), 300);  // 10 x 30 s
    StallWatchdog other_rank(1800, dir.string(), 1, 2);
    EXPECT_DOUBLE_EQ(other_rank.limit(), 300);
    other_rank.step_done(1, 0.01);  // only rank 0 writes the file
  }
  std::ifstream(dir / ".startup-seconds") >> recorded;
  EXPECT_DOUBLE_EQ(recorded, 30);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace baton
