// The implementation-independent parts of dist::Comm: the host-scalar
// convenience (loss / norm reductions), which every backend routes through one virtual hook.
#include "dist/comm.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "dist/wait_state.h"

namespace baton::dist {

double Comm::all_reduce_scalar(double x, ReduceOp op) { return all_reduce_host_scalar(x, op); }

std::string Comm::broadcast_string(const std::string& text, int root) {
  int64_t n = static_cast<int64_t>(text.size());
  broadcast(&n, 1, DType::I64, root);
  std::string out(static_cast<size_t>(n), '\0');
  if (rank() == root) out = text;
  broadcast(out.data(), out.size(), DType::U8, root);
  return out;
}

double Comm::all_reduce_host_scalar(double x, ReduceOp op) {
  all_reduce(&x, 1, DType::F64, op);
  synchronize();
  return x;
}

namespace {
double g_blocked = 0;  // the trainer's thread's (background threads record nothing)
thread_local bool t_background = false;
std::mutex g_wait_mutex;
// Guarded by g_wait_mutex (the watchdog's thread reads it). `whom` points at the communicator's
// name, valid while the wait lasts: set and cleared per blocking call without allocating.
bool g_waiting = false;
const char* g_op = "";
const std::string* g_whom = nullptr;
double g_since = 0;
}  // namespace

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

WaitState current_wait() {
  std::lock_guard<std::mutex> lock(g_wait_mutex);
  if (!g_waiting) return {};
  return {true, g_op, g_whom ? *g_whom : std::string(), g_since};
}

namespace wait_detail {
void enter(const char* op, const std::string* whom) {
  const double now = now_seconds();
  std::lock_guard<std::mutex> lock(g_wait_mutex);
  g_waiting = true;
  g_op = op;
  g_whom = whom;
  g_since = now;
}
void leave() {
  std::lock_guard<std::mutex> lock(g_wait_mutex);
  g_waiting = false;
  g_whom = nullptr;
}
}  // namespace wait_detail

double blocked_seconds() { return g_blocked; }
namespace {
std::atomic<WaitPolicy> g_wait_policy{WaitPolicy::SPIN};
}  // namespace
void set_wait_policy(WaitPolicy policy) { g_wait_policy.store(policy, std::memory_order_relaxed); }
WaitPolicy wait_policy() { return g_wait_policy.load(std::memory_order_relaxed); }
void sleep_backoff(int attempt, int first_us, int max_us) {
  std::this_thread::sleep_for(std::chrono::microseconds(std::min(max_us, first_us << std::min(attempt, 16))));
}
void mark_background_thread() { t_background = true; }
BlockedTimer::BlockedTimer(const char* op, const std::string* whom) : start_(now_seconds()) {
  if (!t_background) wait_detail::enter(op, whom);
}
BlockedTimer::~BlockedTimer() {
  if (t_background) return;
  wait_detail::leave();
  g_blocked += now_seconds() - start_;
}

}  // namespace baton::dist
