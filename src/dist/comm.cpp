// The implementation-independent parts of dist::Comm: the host-scalar
// convenience (loss / norm reductions), which every backend routes through one virtual hook.
#include "dist/comm.h"

#include <chrono>

#include "core/error.h"

namespace baton::dist {

double Comm::all_reduce_scalar(double x, ReduceOp op) { return all_reduce_host_scalar(x, op); }

double Comm::all_reduce_host_scalar(double x, ReduceOp op) {
  all_reduce(&x, 1, DType::F64, op);
  synchronize();
  return x;
}

namespace {
double g_blocked = 0;  // the trainer's thread is the only caller of Comm
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

double blocked_seconds() { return g_blocked; }
BlockedTimer::BlockedTimer() : start_(now_seconds()) {}
BlockedTimer::~BlockedTimer() { g_blocked += now_seconds() - start_; }

}  // namespace baton::dist
