// StallWatchdog: a job that makes no progress — a stopped process (SIGSTOP, a frozen node), a
// deadlock, a rank spinning in compute — used to stall forever, every other rank blocked in a
// collective. A thread on every rank notices when no step has finished for longer than the limit
// and ends the job with one report naming the rank that stopped and what the others wait on
// (dist/wait_state.h: the operation and its peer or group).
//
// The limit, never above run.stall_timeout_s (default 1800 s; 0 = off): while training, once five
// steps are timed, max(60 s, 50 × the median step time); while saving, evaluating or starting,
// 10 × the phase's last measured duration, at least 2 min (phase_limit) — the first save's bound
// comes from its size, a first evaluation's from the step time (expect()); the start-up (resume
// and the first step) from the previous run's start-up in the same run.dir (rank 0 writes it to
// <run.dir>/.startup-seconds at the first step), run.stall_timeout_s the first time.
// Who stopped: each rank's thread rewrites <run.dir>/.heartbeat/rank-R every second (its step,
// what it is doing, what it waits on); a stopped process's file goes stale. The lowest rank whose
// heartbeat is fresh reports (so the job prints one report), then ends its process, and mpirun
// ends the job; the others follow after a grace period in case it cannot. With a run.dir that is
// not shared between nodes a rank sees only its own node's heartbeats: the report says so.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace baton {

// A phase's limit: min(timeout, max(120 s, 10 × `last`)) once it was measured, else
// min(timeout, `first`) when a first bound is known, else timeout.
double phase_limit(double timeout, std::optional<double> last, std::optional<double> first);

class StallWatchdog {
 public:
  // Starts the thread (nothing when timeout_s <= 0). One process has no peer to wait on, but it
  // can still hang (a stuck file system): it is watched too.
  StallWatchdog(double timeout_s, const std::string& run_dir, int rank, int world);
  ~StallWatchdog();
  StallWatchdog(const StallWatchdog&) = delete;
  StallWatchdog& operator=(const StallWatchdog&) = delete;

  // A step finished (1-based step, its wall time).
  void step_done(int64_t step, double seconds);
  // What the rank does between steps: "evaluating", "saving a checkpoint"; "" = training. Leaving a
  // phase measures it: its next occurrence gets phase_limit's bound.
  void phase(const std::string& what);
  // The bound of a phase's first occurrence (e.g. a save's size at a slow disk's 10 MB/s).
  void expect(const std::string& what, double first_limit_s);
  // The limit now, for what the rank is doing (seconds without progress before the report).
  double limit() const;

 private:
  void run();
  double limit_locked() const;
  void write_heartbeat(double now_unix);
  [[noreturn]] void report(double idle, double limit);

  double timeout_;
  std::string dir_, startup_file_;
  int rank_, world_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  int64_t step_ = 0;
  double last_progress_ = 0;  // steady clock
  std::string phase_ = "starting";
  double phase_start_ = 0;                  // steady clock
  std::map<std::string, double> measured_;  // phase -> its last duration
  std::map<std::string, double> first_;     // phase -> the bound of its first occurrence
  std::vector<double> step_seconds_;
  double silent_since_ = -1;  // last_progress_ when this process found itself frozen
  std::thread thread_;
};

}  // namespace baton
