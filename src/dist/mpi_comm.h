// MpiComm: dist::Comm over an MPI communicator with host buffers. Also the bootstrap for NCCL
// (its unique id travels through an MpiComm broadcast).
//
// Invariants:
// - Every MPI call goes through check_mpi(): communicators use MPI_ERRORS_RETURN, so an MPI
//   failure becomes a baton::Error naming the call, and the failure guard (guard.h) turns it into
//   MpiRuntime::abort, which ends every rank. No error path leaves a peer blocked.
// - Counts above INT_MAX elements are rejected (MPI-3 counts are int); callers bucket.
// - BF16 is carried as 2-byte words; SUM/MAX/MIN use user-defined ops that compute in float and
//   round to nearest even, so results match a float reduction rounded once per partial sum.
// - Open MPI (no progress thread) advances non-blocking operations only inside MPI calls. To
//   overlap a bucket's all-reduce with compute, call test() on outstanding requests between
//   compute steps (e.g. after each layer's backward); otherwise most of the work happens in wait().
// - A Request dropped without wait() is leaked, never waited for: waiting in a destructor could
//   block stack unwinding after an error on a collective a failed peer never joins.
#pragma once
#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "dist/comm.h"

namespace baton::dist {

class MpiComm : public Comm {
 public:
  // `owned`: free the communicator on destruction (split results); MPI_COMM_WORLD is not owned.
  MpiComm(MPI_Comm comm, bool owned);
  ~MpiComm() override;
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;

  MPI_Comm handle() const { return comm_; }
  MPI_Comm mpi_handle() const override { return comm_; }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }

  void all_reduce(void* buf, size_t count, DType dtype, ReduceOp op) override;
  RequestPtr all_reduce_async(void* buf, size_t count, DType dtype, ReduceOp op) override;
  void reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype,
                      ReduceOp op) override;
  RequestPtr reduce_scatter_async(const void* send, void* recv, size_t recv_count, DType dtype,
                                  ReduceOp op) override;
  void all_gather(const void* send, void* recv, size_t send_count, DType dtype) override;
  void broadcast(void* buf, size_t count, DType dtype, int root) override;
  RequestPtr send(const void* buf, size_t count, DType dtype, int peer, int tag) override;
  RequestPtr recv(void* buf, size_t count, DType dtype, int peer, int tag) override;
  void barrier() override;
  std::unique_ptr<Comm> split(int color, int key) override;

 private:
  MPI_Comm comm_;
  bool owned_;
  int rank_ = 0, size_ = 1;
  // Names for the wait record, built once (dist/wait_state.h): the group, each member by world rank.
  std::string members_;                 // "ranks 0,2,4"
  std::vector<std::string> peer_names_;  // "rank 4", by group rank
};

// Throws baton::Error("<what> failed: <MPI's message>") unless rc == MPI_SUCCESS.
void check_mpi(int rc, const char* what);

}  // namespace baton::dist
