// StallWatchdog; see stall_watchdog.h.
#include "train/observe/stall_watchdog.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "dist/wait_state.h"

namespace baton {
namespace {

namespace fs = std::filesystem;

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// What a rank is doing, on one line: "step 7, computing" or "step 7, in all_reduce with ranks 0,1
// for 12 s".
std::string doing(int64_t step, const std::string& phase, const dist::WaitState& w, double now) {
  std::string s = fmt::format("step {}, {}", step, phase.empty() ? "training" : phase);
  if (w.waiting) s += fmt::format(", in {} with {} for {:.0f} s", w.op, w.whom, now - w.since);
  else if (phase.empty()) s += ", computing";
  return s;
}

// Writes `text` to `path` through a .tmp renamed over it, so a reader never sees a torn file; a
// failed write (a full disk) removes the .tmp and keeps the last good file. Best effort: false then.
bool replace_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  bool written = false;
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << text;
    f.flush();
    written = f.good();
  }
  std::error_code ec;
  if (!written) {
    fs::remove(tmp, ec);
    return false;
  }
  fs::rename(tmp, path, ec);
  return !ec;
}

// Heartbeats are written every second: one older than this missed three, its process is stopped.
constexpr double kStale = 3.0;

struct Heartbeat {
  bool found = false;
  double age = 0;
  std::string what;
};

}  // namespace

double phase_limit(double timeout, std::optional<double> last, std::optional<double> first) {
  if (last) return std::min(timeout, std::max(120.0, 10.0 * *last));
  return first ? std::min(timeout, *first) : timeout;
}

StallWatchdog::StallWatchdog(double timeout_s, const std::string& run_dir, int rank, int world)
    : timeout_(timeout_s), dir_(run_dir + "/.heartbeat"), startup_file_(run_dir + "/.startup-seconds"), rank_(rank),
      world_(world) {
  last_progress_ = phase_start_ = dist::now_seconds();
  if (timeout_ <= 0) return;
  // The previous run's start-up in this run.dir bounds this one's (a resume reads the same files).
  double previous = 0;
  if (std::ifstream f(startup_file_); f >> previous && previous > 0) measured_["starting"] = previous;
  std::error_code ec;
  fs::create_directories(dir_, ec);
  thread_ = std::thread([this] { run(); });
}

StallWatchdog::~StallWatchdog() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  std::error_code ec;
  fs::remove(fmt::format("{}/rank-{}", dir_, rank_), ec);
  fs::remove(dir_, ec);  // only once every rank's file is gone
}

void StallWatchdog::step_done(int64_t step, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  step_ = step;
  last_progress_ = dist::now_seconds();
  step_seconds_.push_back(seconds);
  if (!phase_.empty()) measured_[phase_] = last_progress_ - phase_start_;
  if (phase_ == "starting" && rank_ == 0 && timeout_ > 0)  // for the next run's bound
    replace_file(startup_file_, fmt::format("{:.3f}\n", measured_[phase_]));
  phase_.clear();
}

void StallWatchdog::phase(const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  const double now = dist::now_seconds();
  if (!phase_.empty() && what != phase_) measured_[phase_] = now - phase_start_;
  if (what != phase_) phase_start_ = now;
  phase_ = what;
  last_progress_ = now;  // entering or leaving a phase is progress too
}

void StallWatchdog::expect(const std::string& what, double first_limit_s) {
  std::lock_guard<std::mutex> lock(mu_);
  first_[what] = first_limit_s;
}

double StallWatchdog::limit() const {
  std::lock_guard<std::mutex> lock(mu_);
  return limit_locked();
}

double StallWatchdog::limit_locked() const {
  if (!phase_.empty()) {
    const auto m = measured_.find(phase_);
    const auto f = first_.find(phase_);
    return phase_limit(timeout_, m == measured_.end() ? std::nullopt : std::optional<double>(m->second),
                       f == first_.end() ? std::nullopt : std::optional<double>(f->second));
  }
  if (step_seconds_.size() < 5) return timeout_;
  std::vector<double> v = step_seconds_;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return std::min(timeout_, std::max(60.0, 50.0 * v[v.size() / 2]));
}

void StallWatchdog::write_heartbeat(double now_unix) {
  const dist::WaitState w = dist::current_wait();
  std::string line;
  {
    std::lock_guard<std::mutex> lock(mu_);
    line = doing(step_, phase_, w, dist::now_seconds());
  }
  // A full disk keeps the last good heartbeat (an empty one renamed over it looked like a dead rank).
  replace_file(fmt::format("{}/rank-{}", dir_, rank_), fmt::format("{:.3f} {}\n{}\n", now_unix, ::getpid(), line));
}

void StallWatchdog::run() {
  std::unique_lock<std::mutex> lock(mu_);
  double last_tick = dist::now_seconds();
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::seconds(1));
    if (stop_) break;
    const double now = dist::now_seconds(), idle = now - last_progress_, limit = limit_locked();
    // A tick long after the last one: this process itself was frozen (SIGSTOP, a suspended
    // node) — it is the stalled rank, not a witness, and stays silent until it makes progress
    // again (mpirun wakes a stopped process only to end the job).
    if (now - last_tick > 3) silent_since_ = last_progress_;
    last_tick = now;
    const bool silent = silent_since_ == last_progress_;
    lock.unlock();
    write_heartbeat(unix_now());
    if (idle > limit && !silent) report(idle, limit);
    lock.lock();
  }
}

void StallWatchdog::report(double idle, double limit) {
  const double now = unix_now();
  std::vector<Heartbeat> beats(static_cast<size_t>(world_));
  for (int r = 0; r < world_; ++r) {
    std::ifstream f(fmt::format("{}/rank-{}", dir_, r));
    double t = 0;
    long pid = 0;
    std::string what;
    if (f >> t >> pid && std::getline(f >> std::ws, what)) beats[r] = {true, now - t, what};
  }
  std::vector<std::string> stopped, seen;
  int reporter = rank_;
  for (int r = world_ - 1; r >= 0; --r)
    if (beats[r].found && beats[r].age <= kStale) reporter = r;
  for (int r = 0; r < world_; ++r) {
    if (!beats[r].found) continue;
    if (beats[r].age > kStale)
      stopped.push_back(fmt::format("rank {} (its last heartbeat is {:.0f} s old: {})", r, beats[r].age, beats[r].what));
    else
      seen.push_back(fmt::format("rank {}: {}", r, beats[r].what));
  }
  std::vector<int> silent;  // ranks with no heartbeat file at all
  for (int r = 0; r < world_; ++r)
    if (!beats[r].found) silent.push_back(r);
  const int missing = static_cast<int>(silent.size());
  if (reporter != rank_) {
    // The reporter ends the job; should it not manage within a grace period, this rank does.
    std::this_thread::sleep_for(std::chrono::seconds(10));
  }
  std::string msg = fmt::format("no progress for {:.0f} s (limit {:.0f} s): ", idle, limit);
  // A rank without any heartbeat beside ranks with fresh ones stopped before its first (it writes one
  // a second after the watchdog starts) — or run.dir is not shared between the nodes.
  const bool others_seen = missing < world_;
  if (!stopped.empty())
    msg += fmt::format("{} stopped responding", fmt::join(stopped, ", "));
  else if (missing > 0 && others_seen)
    msg += fmt::format("rank{} {} wrote no heartbeat: stopped before its first (or run.dir is not shared between "
                       "the nodes)", missing > 1 ? "s" : "", fmt::join(silent, ","));
  else
    msg += "no rank has stopped responding";
  if (!seen.empty()) msg += fmt::format("; {}", fmt::join(seen, "; "));
  if (missing > 0 && !stopped.empty())
    msg += fmt::format("; rank{} {} wrote no heartbeat in {} (run.dir not shared?)", missing > 1 ? "s" : "",
                       fmt::join(silent, ","), dir_);
  std::fprintf(stderr, "error: %s\n", msg.c_str());
  std::fprintf(stderr, "hint: a stopped or hung process (SIGSTOP, a dead node, a deadlock) holds the others; raise "
                       "run.stall_timeout_s if steps, evaluations or saves really take this long (a save or an evaluation "
                       "may take 10x its last duration, at least 2 min; 0 turns the watchdog off)\n");
  std::fflush(stderr);
  // Not MPI_Abort: the training thread is inside MPI (MPI_THREAD_SERIALIZED). A rank ending
  // without MPI_Finalize makes mpirun end the job.
  std::_Exit(1);
}

}  // namespace baton
