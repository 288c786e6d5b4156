// NcclComm: dist::Comm over an NCCL communicator, device buffers, one CUDA device per process.
// Compiled only when CMake found CUDA and NCCL (BATON_HAVE_NCCL).
//
// Stream semantics (comm.h): every call enqueues on the communicator's own stream and returns.
// - That stream is a *blocking* stream (cudaStreamDefault): it is ordered against work on the
//   legacy default stream both ways, so code that computes on stream 0 (tests, simple paths)
//   needs no explicit ordering. Code computing on its own non-blocking stream orders itself with
//   wait_for() (comm waits for the producer) and block() (consumer waits for the comm).
// - Requests are CUDA events recorded after the operation; wait() blocks the host until it is
//   done, test() polls. Inside group_begin()/group_end() NCCL launches nothing until group_end,
//   so requests made there are recorded at group_end and may only be waited on after it.
// - send/recv pairs that must progress together (ring exchange, self send/recv) MUST be bracketed
//   by group_begin/group_end, otherwise the first send blocks the stream and deadlocks.
// - The communicator keeps a host MPI communicator over the same ranks (`bootstrap`): it carries
//   the NCCL unique id and builds split communicators on NCCL versions without ncclCommSplit.
#pragma once
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <memory>
#include <vector>

#include "dist/comm.h"

namespace baton::dist {

struct NcclEventSlot;  // a request's completion event (nccl_comm.cpp)

class NcclComm : public Comm {
 public:
  // Takes ownership of `comm` and `bootstrap` (an MPI group with the same ranks, same order).
  NcclComm(ncclComm_t comm, int cuda_device, std::unique_ptr<Comm> bootstrap);
  ~NcclComm() override;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  ncclComm_t handle() const { return comm_; }
  cudaStream_t stream() const { return stream_; }
  int device() const { return device_; }
  // Later operations of this communicator wait for the work enqueued so far on `producer`.
  void wait_for(cudaStream_t producer);
  // Later work on `consumer` waits for the operations enqueued so far on this communicator.
  void block(cudaStream_t consumer);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }

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
  void group_begin() override;
  void group_end() override;
  void barrier() override;   // an all-reduce of one element, then synchronize()
  void synchronize() override;  // host waits for everything enqueued on stream()
  std::unique_ptr<Comm> split(int color, int key) override;

 protected:
  double all_reduce_host_scalar(double x, ReduceOp op) override;

 private:
  RequestPtr make_request();
  void check(ncclResult_t rc, const char* what) const;

  ncclComm_t comm_ = nullptr;
  int device_ = 0;
  std::unique_ptr<Comm> bootstrap_;
  int rank_ = 0, size_ = 1;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t order_event_ = nullptr;  // for wait_for / block
  double* scratch_ = nullptr;          // one device double: barrier and host scalars
  int group_depth_ = 0;
  std::vector<std::shared_ptr<NcclEventSlot>> pending_;  // requests made inside the open group
};

// Collective over `mpi_bootstrap` (an MPI Comm): rank 0 creates the NCCL unique id, broadcasts
// it, and every rank joins an NCCL communicator of the same ranks on `cuda_device`.
std::unique_ptr<Comm> make_nccl_comm(Comm& mpi_bootstrap, int cuda_device);

}  // namespace baton::dist
