// MpiComm: each Comm call is one MPI call on host buffers (see mpi_comm.h for the invariants).
#include "dist/mpi_comm.h"

#include <climits>

#include <fmt/ranges.h>

#include <vector>

#include "core/error.h"
#include "dist/mpi_types.h"

namespace baton::dist {
namespace {

int to_count(size_t n, const char* what) {
  BATON_REQUIRE(n <= static_cast<size_t>(INT_MAX),
                fmt::format("{}: {} elements exceed MPI's per-call limit of {}", what, n, INT_MAX),
                "split the message (e.g. smaller gradient buckets)");
  return static_cast<int>(n);
}

// Completes `req` the way wait_policy() says (dist/comm.h): MPI_Wait, or MPI_Test with sleeps of
// 20 µs doubling to 1 ms between tests.
void finish(MPI_Request* req, MPI_Status* st) {
  if (wait_policy() == WaitPolicy::SPIN) {
    check_mpi(MPI_Wait(req, st), "MPI_Wait");
    return;
  }
  int done = 0;
  for (int attempt = 0;; ++attempt) {
    check_mpi(MPI_Test(req, &done, st), "MPI_Test");
    if (done) return;
    sleep_backoff(attempt, 20, 1000);
  }
}

// A blocking collective: the blocking MPI call (SPIN), or its nonblocking twin completed by
// finish() (SLEEP) — MPI libraries may pick other algorithms for the two, so SPIN keeps the call.
template <class Blocking, class Nonblocking>
void collective(const char* name, Blocking blocking, Nonblocking nonblocking) {
  if (wait_policy() == WaitPolicy::SPIN) {
    check_mpi(blocking(), name);
    return;
  }
  MPI_Request r;
  check_mpi(nonblocking(&r), name);
  finish(&r, MPI_STATUS_IGNORE);
}

int tag_upper_bound() {
  int* ub = nullptr;
  int found = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &found);
  return found && ub ? *ub : 32767;  // 32767 is the least the standard guarantees
}

// One outstanding MPI request. For receives it also checks that the message had the expected
// length: a short message is legal MPI but always a pairing bug in baton's schedules.
class MpiRequest : public Request {
 public:
  MpiRequest(MPI_Request r, MPI_Datatype dt, int expected_count, const char* op, const std::string* whom)
      : req_(r), dt_(dt), expected_(expected_count), op_(op), whom_(whom) {}

  void wait() override {
    if (req_ == MPI_REQUEST_NULL) return;
    BlockedTimer blocked(op_, whom_);
    MPI_Status st;
    finish(&req_, &st);
    check_length(st);
  }

  bool cancel() override {
    if (req_ == MPI_REQUEST_NULL || expected_ < 0) return false;  // done, or a send (not withdrawn)
    check_mpi(MPI_Cancel(&req_), "MPI_Cancel");
    MPI_Status st;
    check_mpi(MPI_Wait(&req_, &st), "MPI_Wait (cancelled receive)");
    int cancelled = 0;
    check_mpi(MPI_Test_cancelled(&st, &cancelled), "MPI_Test_cancelled");
    if (!cancelled) {  // a message had matched: it is complete now, as after wait()
      check_length(st);
      return false;
    }
    return true;
  }

  bool test() override {
    if (req_ == MPI_REQUEST_NULL) return true;
    int done = 0;
    MPI_Status st;
    check_mpi(MPI_Test(&req_, &done, &st), "MPI_Test");
    if (done) check_length(st);
    return done != 0;
  }

 private:
  void check_length(const MPI_Status& st) const {
    if (expected_ < 0) return;
    int got = 0;
    check_mpi(MPI_Get_count(&st, dt_, &got), "MPI_Get_count");
    BATON_ASSERT(got == expected_, "recv from rank {} tag {}: got {} elements, expected {}",
                 st.MPI_SOURCE, st.MPI_TAG, got, expected_);
  }

  MPI_Request req_;
  MPI_Datatype dt_;
  int expected_;  // -1: not a receive
  const char* op_;          // for the wait record (dist/wait_state.h)
  const std::string* whom_;  // the communicator's name for the peer or group (outlives the request)
};

RequestPtr wrap(MPI_Request r, const char* op, const std::string* whom, MPI_Datatype dt = MPI_DATATYPE_NULL,
                int expected = -1) {
  return std::make_unique<MpiRequest>(r, dt, expected, op, whom);
}

}  // namespace

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) len = 0;
  throw Error(fmt::format("{} failed: {}", what, len ? std::string(msg, len) : "unknown MPI error"),
              "an MPI failure usually means a rank died or the network failed; check every "
              "rank's output above");
}

MpiComm::MpiComm(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
  // Errors come back as return codes so they become baton::Errors with a message (mpi_comm.h).
  check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  // The members' world ranks, once: the wait record names them (dist/wait_state.h).
  MPI_Group group, world;
  check_mpi(MPI_Comm_group(comm_, &group), "MPI_Comm_group");
  check_mpi(MPI_Comm_group(MPI_COMM_WORLD, &world), "MPI_Comm_group");
  std::vector<int> mine(size_), theirs(size_);
  for (int i = 0; i < size_; ++i) mine[i] = i;
  check_mpi(MPI_Group_translate_ranks(group, size_, mine.data(), world, theirs.data()), "MPI_Group_translate_ranks");
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  members_ = fmt::format("ranks {}", fmt::join(theirs, ","));
  for (int w : theirs) peer_names_.push_back(fmt::format("rank {}", w));
}

MpiComm::~MpiComm() {
  int finalized = 1;
  MPI_Finalized(&finalized);
  // After MPI_Finalize every communicator is gone already; freeing would be an error.
  if (owned_ && !finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiComm::all_reduce(void* buf, size_t count, DType dtype, ReduceOp op) {
  BlockedTimer blocked("all_reduce", &members_);
  const int n = to_count(count, "all_reduce");
  collective(
      "MPI_Allreduce",
      [&] { return MPI_Allreduce(MPI_IN_PLACE, buf, n, mpi::datatype(dtype), mpi::op(op, dtype), comm_); },
      [&](MPI_Request* r) {
        return MPI_Iallreduce(MPI_IN_PLACE, buf, n, mpi::datatype(dtype), mpi::op(op, dtype), comm_, r);
      });
}

RequestPtr MpiComm::all_reduce_async(void* buf, size_t count, DType dtype, ReduceOp op) {
  MPI_Request r;
  check_mpi(MPI_Iallreduce(MPI_IN_PLACE, buf, to_count(count, "all_reduce_async"),
                           mpi::datatype(dtype), mpi::op(op, dtype), comm_, &r),
            "MPI_Iallreduce");
  return wrap(r, "all_reduce (async)", &members_);
}

void MpiComm::reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype,
                             ReduceOp op) {
  BlockedTimer blocked("reduce_scatter", &members_);
  const int n = to_count(recv_count, "reduce_scatter");
  collective(
      "MPI_Reduce_scatter_block",
      [&] { return MPI_Reduce_scatter_block(send, recv, n, mpi::datatype(dtype), mpi::op(op, dtype), comm_); },
      [&](MPI_Request* r) {
        return MPI_Ireduce_scatter_block(send, recv, n, mpi::datatype(dtype), mpi::op(op, dtype), comm_, r);
      });
}

RequestPtr MpiComm::reduce_scatter_async(const void* send, void* recv, size_t recv_count,
                                         DType dtype, ReduceOp op) {
  MPI_Request r;
  check_mpi(MPI_Ireduce_scatter_block(send, recv, to_count(recv_count, "reduce_scatter_async"),
                                      mpi::datatype(dtype), mpi::op(op, dtype), comm_, &r),
            "MPI_Ireduce_scatter_block");
  return wrap(r, "reduce_scatter (async)", &members_);
}

void MpiComm::all_gather(const void* send, void* recv, size_t send_count, DType dtype) {
  BlockedTimer blocked("all_gather", &members_);
  const int n = to_count(send_count, "all_gather");
  const auto* own_block =
      static_cast<const char*>(recv) + static_cast<size_t>(rank_) * send_count * dtype_size(dtype);
  // MPI forbids aliasing send and recv buffers except through MPI_IN_PLACE.
  const void* src = (send == own_block) ? MPI_IN_PLACE : send;
  const MPI_Datatype t = mpi::datatype(dtype);
  collective(
      "MPI_Allgather", [&] { return MPI_Allgather(src, n, t, recv, n, t, comm_); },
      [&](MPI_Request* r) { return MPI_Iallgather(src, n, t, recv, n, t, comm_, r); });
}

void MpiComm::broadcast(void* buf, size_t count, DType dtype, int root) {
  BlockedTimer blocked("broadcast", &members_);
  BATON_ASSERT(root >= 0 && root < size_, "broadcast root {} outside group of {}", root, size_);
  const int n = to_count(count, "broadcast");
  collective(
      "MPI_Bcast", [&] { return MPI_Bcast(buf, n, mpi::datatype(dtype), root, comm_); },
      [&](MPI_Request* r) { return MPI_Ibcast(buf, n, mpi::datatype(dtype), root, comm_, r); });
}

RequestPtr MpiComm::send(const void* buf, size_t count, DType dtype, int peer, int tag) {
  static const int tag_ub = tag_upper_bound();
  BATON_ASSERT(peer >= 0 && peer < size_, "send to rank {} outside group of {}", peer, size_);
  BATON_ASSERT(tag >= 0 && tag <= tag_ub, "send tag {} outside [0, {}]", tag, tag_ub);
  MPI_Request r;
  check_mpi(MPI_Isend(buf, to_count(count, "send"), mpi::datatype(dtype), peer, tag, comm_, &r),
            "MPI_Isend");
  return wrap(r, "send", &peer_names_[peer]);
}

RequestPtr MpiComm::recv(void* buf, size_t count, DType dtype, int peer, int tag) {
  static const int tag_ub = tag_upper_bound();
  BATON_ASSERT(peer >= 0 && peer < size_, "recv from rank {} outside group of {}", peer, size_);
  BATON_ASSERT(tag >= 0 && tag <= tag_ub, "recv tag {} outside [0, {}]", tag, tag_ub);
  const int n = to_count(count, "recv");
  MPI_Request r;
  check_mpi(MPI_Irecv(buf, n, mpi::datatype(dtype), peer, tag, comm_, &r), "MPI_Irecv");
  return wrap(r, "recv", &peer_names_[peer], mpi::datatype(dtype), n);
}

void MpiComm::barrier() {
  BlockedTimer blocked("barrier", &members_);
  collective(
      "MPI_Barrier", [&] { return MPI_Barrier(comm_); }, [&](MPI_Request* r) { return MPI_Ibarrier(comm_, r); });
}

std::unique_ptr<Comm> MpiComm::split(int color, int key) {
  // MPI_UNDEFINED (negative) would return MPI_COMM_NULL; the contract has every rank in a group.
  BATON_ASSERT(color >= 0, "split color {} must be non-negative", color);
  MPI_Comm out = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split(comm_, color, key, &out), "MPI_Comm_split");
  return std::make_unique<MpiComm>(out, /*owned=*/true);
}

}  // namespace baton::dist
