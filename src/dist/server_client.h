// A virtual worker's (or, with hetero.placement = "local", a stage's) client of the WSP parameter
// server (dist/param_server.h) whose pushes and pulls overlap the training thread's compute (issue
// 13 item 4; docs/hetpipe.md "The parameter server").
//
// With `background` on, a thread of its own does every ParamServer call:
// - push() hands the wave update over (the caller's copy) and returns at once; the thread pushes
//   the queued waves in order.
// - request_pull(needs) asks for w_global as of c_global ≥ needs; the thread tries it whenever no
//   push is queued (pushes first: a pull may need this VW's own last wave), sleeping between tries
//   (50 µs doubling to 2 ms, woken early by a new push), and keeps the result.
// - take_pull() returns that result if it has come (never blocks); wait_pull() blocks for it (the
//   pull that gates the next minibatch), recorded as a blocking wait (dist/comm.h BlockedTimer).
// At most one pull is outstanding: the clock rule asks for the next only after merging this one.
// With `background` off (deterministic mode, whose fixed order of server accesses a thread would
// break, or an MPI without MPI_THREAD_MULTIPLE) the same calls run on the caller's thread: push()
// pushes, take_pull() is one try, wait_pull() blocks in ParamServer::pull.
//
// The thread's MPI calls overlap the training thread's (send/recv between stages, barriers), so
// `background` needs MPI_THREAD_MULTIPLE (MpiRuntime::thread_multiple()). An error on the thread
// (an MPI failure) is rethrown by the next call on the training thread. The destructor stops the
// thread after the pushes queued so far (drain() waits for them explicitly).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "dist/param_server.h"

namespace baton::dist {

class ServerClient {
 public:
  // `pushes`, `pulls`: the tensors this client pushes and pulls (the server's own all() for a whole
  // VW; a stage's owned and held tensors with hetero.placement = "local"); they must outlive the
  // client, like `server`. Buffers are flat, `flat` floats (holding the server's tensor spans).
  ServerClient(ParamServer& server, const ParamServer::Selection& pushes, const ParamServer::Selection& pulls, int vw,
               size_t flat, bool background);
  ~ServerClient();
  ServerClient(const ServerClient&) = delete;
  ServerClient& operator=(const ServerClient&) = delete;

  bool background() const { return thread_.joinable(); }

  // The VW's wave `wave` (waves in order; the server's numbering).
  void push(int64_t wave, std::vector<float> delta);
  // Starts the pull of c_global ≥ `needs` (none may be outstanding).
  void request_pull(int64_t needs);
  bool pull_requested() const { return needs_.has_value(); }
  // The outstanding pull's c_global, its data swapped into `out` (the server's flat size), if it
  // has returned; nullopt otherwise (and when none is outstanding).
  std::optional<int64_t> take_pull(std::vector<float>& out);
  // Blocks until the outstanding pull returns; `blocked_s` gets the seconds waited.
  int64_t wait_pull(std::vector<float>& out, double* blocked_s = nullptr);
  // Forgets the outstanding pull and its result if it came (a checkpoint's meeting asks for a
  // fresher one: dist callers merge only what they take).
  void cancel_pull();
  // Blocks until every queued push is on the server.
  void drain();

 private:
  void run();                    // the thread
  void rethrow_locked() const;   // an error of the thread, on the caller's thread

  ParamServer& server_;
  const ParamServer::Selection& push_sel_;
  const ParamServer::Selection& pull_sel_;
  int vw_;
  size_t flat_;
  std::optional<int64_t> needs_;  // the outstanding pull (training thread's view)

  std::mutex mutex_;
  std::condition_variable wake_;  // to the thread: a push, a pull request, stop
  std::condition_variable done_;  // to the training thread: a push done, a pull returned, an error
  std::deque<std::pair<int64_t, std::vector<float>>> pushes_;
  bool pushing_ = false;               // the thread is pushing one it took off the queue
  std::optional<int64_t> pull_needs_;  // the thread's pending pull
  uint64_t pull_gen_ = 0;              // per request/cancel: a try of an older one is dropped
  std::optional<int64_t> pulled_;      // its result (data in pulled_data_)
  std::vector<float> pulled_data_;
  bool stop_ = false, exited_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace baton::dist
