// Checkpoint directories: the save protocol (tmp -> fsync -> rename -> latest -> prune), keep = N,
// crash safety with real child processes (injected _exit at every point of a save, and SIGKILL in
// the middle of writing), and which checkpoint `resume` picks.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "test_checkpoint_fixture.h"
#include "train/checkpoint/checkpoint_dir.h"
#include "train/checkpoint/checkpoint_resume.h"

namespace baton {
namespace {

using testing::SmallState;
using testing::TmpDir;

std::vector<int64_t> steps_in(const std::string& dir) {
  std::vector<int64_t> s;
  for (const CheckpointEntry& e : list_checkpoints(dir)) s.push_back(e.step);
  return s;
}

std::string latest_name(const std::string& dir) {
  auto p = read_latest(dir);
  return p ? std::filesystem::path(*p).filename().string() : "";
}

bool has_tmp(const std::string& dir) {
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().string().ends_with(".tmp")) return true;
  return false;
}

// Loads a candidate the way the trainer does: fully, with verification.
CheckpointMeta load_into(SmallState& s, const std::string& path) {
  return read_train_state(path, s.table(), s.host);
}

TEST(CheckpointDir, SaveWritesLatestAndKeepsTheNewestN) {
  TmpDir dir;
  SmallState state;
  for (int64_t step = 1; step <= 5; ++step) {
    const SaveResult r = save_checkpoint(dir.path(), testing::test_meta(step), state.shards(), 2, MPI_COMM_NULL);
    EXPECT_EQ(r.path, dir / checkpoint_file_name(step));
    EXPECT_GT(r.bytes, 0u);
    EXPECT_EQ(latest_name(dir.path()), checkpoint_file_name(step));
  }
  EXPECT_EQ(steps_in(dir.path()), (std::vector<int64_t>{4, 5}));
  EXPECT_FALSE(has_tmp(dir.path()));
  EXPECT_EQ(checkpoint_file_name(200), "step-0000200.h5");
  EXPECT_EQ(resolve_checkpoint(dir.path()), dir / "step-0000005.h5");
}

// Forks a child that saves step 3 with `env` set (BATON_CKPT_FAIL_AT / _PAUSE_AT). With a pause,
// the child's stderr is read until it reports the pause and then it is killed with SIGKILL.
// Returns the child's wait status.
int save_in_child(const std::string& dir, SmallState& state, const char* env, const char* value) {
  int pipefd[2];
  EXPECT_EQ(pipe(pipefd), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(pipefd[1], 2);
    setenv(env, value, 1);
    save_checkpoint(dir, testing::test_meta(3), state.shards(), 2, MPI_COMM_NULL);
    _exit(0);  // must not get here
  }
  close(pipefd[1]);
  if (std::string(env) == "BATON_CKPT_PAUSE_AT") {
    char buf[256] = {};
    const ssize_t n = read(pipefd[0], buf, sizeof buf - 1);  // blocks until the pause message
    EXPECT_GT(n, 0);
    EXPECT_NE(std::string(buf).find("paused at"), std::string::npos) << buf;
    kill(pid, SIGKILL);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  close(pipefd[0]);
  return status;
}

TEST(CheckpointDir, AnInterruptedSaveLeavesThePreviousCheckpointLoadable) {
  for (const char* point : {"after_create", "mid_write", "before_rename", "before_latest", "before_prune"}) {
    SCOPED_TRACE(point);
    TmpDir dir;
    SmallState old_state, new_state(32, 1.0f);
    save_checkpoint(dir.path(), testing::test_meta(1), old_state.shards(), 2, MPI_COMM_NULL);
    save_checkpoint(dir.path(), testing::test_meta(2), old_state.shards(), 2, MPI_COMM_NULL);
    const int status = save_in_child(dir.path(), new_state, "BATON_CKPT_FAIL_AT",
                                     (std::string(point) + "@3").c_str());
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 86) << status;

    const bool renamed = std::string(point) == "before_latest" || std::string(point) == "before_prune";
    // The new checkpoint exists only once complete; `latest` never names an incomplete file.
    EXPECT_EQ(steps_in(dir.path()).back(), renamed ? 3 : 2);
    EXPECT_EQ(latest_name(dir.path()), std::string(point) == "before_prune" ? "step-0000003.h5" : "step-0000002.h5");
    SmallState loaded(32, 7.0f);
    const auto p = choose_resume_point({.resume = "auto"}, dir.path(),
                                       [&](const std::string& path) { return load_into(loaded, path); });
    ASSERT_TRUE(p.has_value());
    EXPECT_EQ(p->meta.step, renamed ? 3 : 2);
    EXPECT_EQ(loaded.host.params, (renamed ? new_state : old_state).host.params);
    // The next save completes and clears the leftovers.
    save_checkpoint(dir.path(), testing::test_meta(4), new_state.shards(), 2, MPI_COMM_NULL);
    EXPECT_FALSE(has_tmp(dir.path()));
    EXPECT_EQ(steps_in(dir.path()), (std::vector<int64_t>{renamed ? 3 : 2, 4}));
  }
}

TEST(CheckpointDir, SigkillWhileWritingLeavesThePreviousCheckpointAsLatest) {
  TmpDir dir;
  SmallState state;
  save_checkpoint(dir.path(), testing::test_meta(2), state.shards(), 2, MPI_COMM_NULL);
  const int status = save_in_child(dir.path(), state, "BATON_CKPT_PAUSE_AT", "mid_write@3");
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  EXPECT_TRUE(std::filesystem::exists(dir / "step-0000003.h5.tmp"));  // half-written, ignored
  EXPECT_EQ(steps_in(dir.path()), (std::vector<int64_t>{2}));
  EXPECT_EQ(latest_name(dir.path()), "step-0000002.h5");
  SmallState loaded(32, 7.0f);
  const auto p = choose_resume_point({.resume = "auto"}, dir.path(),
                                     [&](const std::string& path) { return load_into(loaded, path); });
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->meta.step, 2);
}

TEST(CheckpointResume, AutoSkipsDamagedFilesAndSetsThemAside) {
  TmpDir dir;
  SmallState state;
  for (int64_t step : {1, 2}) save_checkpoint(dir.path(), testing::test_meta(step), state.shards(), 3, MPI_COMM_NULL);
  std::filesystem::resize_file(dir / "step-0000002.h5", 1000);  // newest and latest: truncated
  SmallState loaded(32, 7.0f);
  auto load = [&](const std::string& path) { return load_into(loaded, path); };
  const auto p = choose_resume_point({.resume = "auto"}, dir.path(), load);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->meta.step, 1);
  EXPECT_TRUE(std::filesystem::exists(dir / "step-0000002.h5.damaged"));
  EXPECT_NO_THROW(require_no_newer_checkpoints(dir.path(), 1));

  // An explicit path is loaded or fails; it is never skipped.
  std::filesystem::resize_file(dir / "step-0000001.h5", 1000);
  EXPECT_THROW(choose_resume_point({.resume = dir / "step-0000001.h5"}, dir.path(), load), CheckpointDamaged);
  // "auto" with only damaged checkpoints is an error rather than a silent fresh start.
  EXPECT_THROW(choose_resume_point({.resume = "auto"}, dir.path(), load), Error);
  EXPECT_FALSE(choose_resume_point({.resume = "never"}, dir.path(), load).has_value());
}

TEST(CheckpointResume, EmptyDirectoryStartsFreshAndNewerCheckpointsAreRefused) {
  TmpDir dir;
  SmallState state;
  auto load = [&](const std::string& path) { return load_into(state, path); };
  EXPECT_FALSE(choose_resume_point({.resume = "auto"}, dir / "nothing-here", load).has_value());
  EXPECT_THROW(resolve_checkpoint(dir.path()), Error);
  save_checkpoint(dir.path(), testing::test_meta(5), state.shards(), 3, MPI_COMM_NULL);
  EXPECT_NO_THROW(require_no_newer_checkpoints(dir.path(), 5));
  EXPECT_THROW(require_no_newer_checkpoints(dir.path(), 0), Error);  // resume = "never" into an old run
  // A `latest` naming the newest is what `generate DIR` and `ckpt inspect DIR` use.
  EXPECT_EQ(resolve_checkpoint(dir.path()), dir / "step-0000005.h5");
}

}  // namespace
}  // namespace baton
