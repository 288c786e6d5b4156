// What this rank is waiting on right now, for the stall watchdog (train/observe/stall_watchdog.h) to read
// from its own thread while the training thread is blocked inside MPI: the operation, the peer
// (world rank) of a point-to-point wait or the world ranks of a collective's group, and since when.
// Set by BlockedTimer around every blocking communication call (dist/comm.h); cheap: a mutex and
// three stores per blocking call.
#pragma once
#include <string>

namespace baton::dist {

struct WaitState {
  bool waiting = false;
  std::string op;     // "all_reduce", "recv", "wait (send)", "barrier", ...
  std::string whom;   // "rank 3" or "ranks 0,1,2,3"
  double since = 0;   // seconds on the steady clock (now_seconds())
};

// The current wait (waiting = false when the rank is computing).
WaitState current_wait();
double now_seconds();  // the steady clock the record uses

namespace wait_detail {
void enter(const char* op, const std::string* whom);
void leave();
}  // namespace wait_detail

}  // namespace baton::dist
