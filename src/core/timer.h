// Wall-clock timing for step times and progress lines; a compute interval's wall and CPU time.
#pragma once
#include <time.h>

#include <chrono>

namespace baton {

class Timer {
 public:
  Timer() : start_(std::chrono::steady_clock::now()) {}
  void reset() { start_ = std::chrono::steady_clock::now(); }
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  double ms() const { return seconds() * 1e3; }

 private:
  std::chrono::steady_clock::time_point start_;
};

// CPU seconds the calling thread has used (CLOCK_THREAD_CPUTIME_ID): unlike its wall time, not
// stretched while other processes share its core.
inline double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// A compute interval on the calling thread: wall seconds and the thread's CPU seconds.
struct WorkTime {
  double wall = 0, cpu = 0;
};
class WorkTimer {
 public:
  WorkTime elapsed() const { return {wall_.seconds(), thread_cpu_seconds() - cpu0_}; }

 private:
  Timer wall_;
  double cpu0_ = thread_cpu_seconds();
};

}  // namespace baton
