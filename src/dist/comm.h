// dist::Comm: the collectives and point-to-point messages baton's parallelism needs, over a group
// of ranks. Implementations: MPI (host buffers; also bootstraps NCCL) and NCCL (device buffers, on
// the communicator's own CUDA stream). Groups are explicit objects passed to whoever needs them
// (ProcessGroups in process_groups.h); there is no global communicator state.
//
// Semantics common to every implementation:
// - Collective calls (all_reduce, reduce_scatter, all_gather, broadcast, barrier, split) must be
//   made by every rank of the group in the same order.
// - Blocking calls return when this rank's buffers may be reused (MPI) or when the operation is
//   enqueued on the communicator's stream (NCCL: the caller orders compute against it with
//   events; `synchronize()` waits for everything enqueued).
// - Asynchronous calls return a Request; `wait` completes it. A Request must be waited on once.
// - Counts are in elements of `dtype`.
#pragma once
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace baton::dist {

using baton::DType;  // core/dtype.h
using baton::dtype_size;
enum class ReduceOp : uint8_t { SUM, MAX, MIN };

class Request {
 public:
  virtual ~Request() = default;
  virtual void wait() = 0;
  virtual bool test() = 0;  // true when complete (then wait() returns at once)
  // A posted receive that no message has matched yet is withdrawn: true when it was (the request
  // is then complete and its buffer untouched), false when a message had arrived (wait() then
  // completes it as usual) or the kind of request cannot be withdrawn. A pipeline whose run is
  // cut short withdraws the receives of micro-batches that will never be sent (Executor::retarget).
  virtual bool cancel() { return false; }
};
using RequestPtr = std::unique_ptr<Request>;

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "mpi" | "nccl"

  // In place: buf[i] = op over ranks of buf[i].
  virtual void all_reduce(void* buf, size_t count, DType dtype, ReduceOp op) = 0;
  virtual RequestPtr all_reduce_async(void* buf, size_t count, DType dtype, ReduceOp op) = 0;
  // send[size * recv_count] -> recv[recv_count]: rank r receives the op-reduction of block r.
  virtual void reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype,
                              ReduceOp op) = 0;
  virtual RequestPtr reduce_scatter_async(const void* send, void* recv, size_t recv_count,
                                          DType dtype, ReduceOp op) = 0;
  // send[send_count] -> recv[size * send_count], block r from rank r. send may equal
  // recv + rank * send_count (in place).
  virtual void all_gather(const void* send, void* recv, size_t send_count, DType dtype) = 0;
  virtual void broadcast(void* buf, size_t count, DType dtype, int root) = 0;
  virtual RequestPtr send(const void* buf, size_t count, DType dtype, int peer, int tag) = 0;
  virtual RequestPtr recv(void* buf, size_t count, DType dtype, int peer, int tag) = 0;
  // Brackets several send/recv calls that must progress together (NCCL group semantics; MPI:
  // no-op since its point-to-point calls are already non-blocking).
  virtual void group_begin() {}
  virtual void group_end() {}
  virtual void barrier() = 0;
  virtual void synchronize() {}
  // Ranks with the same color form a new group, ordered by key (then by rank in this group).
  virtual std::unique_ptr<Comm> split(int color, int key) = 0;
  // The MPI communicator over the same ranks, for what speaks MPI itself (MPI-IO checkpoints,
  // one-sided windows of the parameter server); MPI_COMM_NULL where there is none (one process
  // without MPI, NCCL alone).
  virtual MPI_Comm mpi_handle() const { return MPI_COMM_NULL; }

  // Typed conveniences for host-side scalars (MPI) — e.g. loss and norm reductions.
  double all_reduce_scalar(double x, ReduceOp op = ReduceOp::SUM);
  // `root`'s text on every rank (its length, then its bytes; host buffers, MPI). Collective.
  std::string broadcast_string(const std::string& text, int root);

 protected:
  // all_reduce_scalar's transport. The default reduces the host double in place, which is right
  // for host-buffer communicators; device-buffer ones (NCCL) stage it through device memory.
  virtual double all_reduce_host_scalar(double x, ReduceOp op);
};

// Seconds this process has spent blocked in communication (blocking calls and Request::wait) since
// it started: the trainer reports the share of step time it takes. Implementations add to it with
// a BlockedTimer around each blocking section, which also records what is waited on, for whom
// (dist/wait_state.h: the stall watchdog's report).
double blocked_seconds();
// Called once by a communication thread that runs beside the trainer's (dist/server_client.h): its
// blocking calls are overlapped with compute, so BlockedTimer neither counts nor reports them.
void mark_background_thread();

// How Request::wait spends a wait. SPIN (the default): MPI_Wait, the lowest latency — MPI polls,
// keeping a core busy (Open MPI yields between polls when oversubscribed, which still costs a core's
// worth of system calls). SLEEP: MPI_Test with sleeps of 20 µs doubling to 1 ms between tests, so
// a waiting rank leaves the cores to the ranks that compute — for CPU ranks standing for devices
// (hetero.slowdown/jitter), where ranks oversubscribe the machine and each rank's emulated speed
// assumes the others barely take its core (train/hetero/compute_stretch.h). Process-wide.
enum class WaitPolicy : uint8_t { SPIN, SLEEP };
void set_wait_policy(WaitPolicy policy);
WaitPolicy wait_policy();
// The sleep between two polls of something another rank completes: first_us, doubling with each
// attempt (from 0), at most max_us. Every polling wait (SLEEP, the parameter server's pulls, the
// deterministic mode's turns) backs off this way, leaving the core to the ranks that compute.
void sleep_backoff(int attempt, int first_us, int max_us);

class BlockedTimer {
 public:
  explicit BlockedTimer(const char* op = "communication", const std::string* whom = nullptr);
  ~BlockedTimer();
  BlockedTimer(const BlockedTimer&) = delete;
  BlockedTimer& operator=(const BlockedTimer&) = delete;

 private:
  double start_;
};

// MPI runtime. init() is idempotent and safe when not launched by mpirun (singleton); world()
// wraps MPI_COMM_WORLD. abort() tears the whole job down (every rank) with `code`.
class MpiRuntime {
 public:
  // `thread_multiple`: ask for MPI_THREAD_MULTIPLE (a WSP parameter-server client thread,
  // dist/server_client.h); otherwise SERIALIZED. Only the first call's choice counts.
  static void init(int* argc, char*** argv, bool thread_multiple = false);
  // Whether MPI provides MPI_THREAD_MULTIPLE (false before init or without it).
  static bool thread_multiple();
  static bool initialized();
  static void finalize();
  [[noreturn]] static void abort(int code);
  static std::unique_ptr<Comm> world();
};

}  // namespace baton::dist
