// The implementation-independent parts of dist::Comm: the host-scalar
// convenience (loss / norm reductions), which every backend routes through one virtual hook.
#include "dist/comm.h"

#include <chrono>
#include <mutex>

#include "core/error.h"
#include "dist/wait_state.h"

namespace baton::dist {

double Comm::all_reduce_scalar(double x, ReduceOp op) { return all_reduce_host_scalar(x, op); }

double Comm::all_reduce_host_scalar(double x, ReduceOp op) {
  all_reduce(&x, 1, DType::F64, op);
  synchronize();
  return x;
}

namespace {
double g_blocked = 0;  // the trainer's thread is the only caller of Comm
std::mutex g_wait_mutex;
WaitState g_wait;  // guarded by g_wait_mutex (the watchdog's thread reads it)
}  // namespace

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

WaitState current_wait() {
  std::lock_guard<std::mutex> lock(g_wait_mutex);
  return g_wait;
}

namespace wait_detail {
void enter(const char* op, const std::string* whom) {
  std::lock_guard<std::mutex> lock(g_wait_mutex);
  g_wait.waiting = true;
  g_wait.op = op;
  g_wait.whom = whom ? *whom : std::string();
  g_wait.since = now_seconds();
}
void leave() {
  std::lock_guard<std::mutex> lock(g_wait_mutex);
  g_wait.waiting = false;
}
}  // namespace wait_detail

double blocked_seconds() { return g_blocked; }
BlockedTimer::BlockedTimer(const char* op, const std::string* whom) : start_(now_seconds()) {
  wait_detail::enter(op, whom);
}
BlockedTimer::~BlockedTimer() {
  wait_detail::leave();
  g_blocked += now_seconds() - start_;
}

}  // namespace baton::dist
