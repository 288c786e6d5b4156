// SelfComm: the communicator of a group of one rank, without MPI — what a one-process run (no
// mpirun) uses where the runtime wants a group: a one-stage pipeline's executor, a tensor- or
// data-parallel group of one. Reductions over one rank leave the data as it is; the gathers and
// scatters copy host memory when their buffers differ (callers skip groups of one for device
// buffers); there is no peer to send to, so point-to-point calls are a bug.
#pragma once
#include <memory>
#include <string>

#include "dist/comm.h"

namespace baton::dist {

class SelfComm final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "self"; }
  void all_reduce(void*, size_t, DType, ReduceOp) override {}
  RequestPtr all_reduce_async(void*, size_t, DType, ReduceOp) override;
  void reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp) override;
  RequestPtr reduce_scatter_async(const void* send, void* recv, size_t recv_count, DType dtype,
                                  ReduceOp op) override;
  void all_gather(const void* send, void* recv, size_t send_count, DType dtype) override;
  void broadcast(void*, size_t, DType, int) override {}
  RequestPtr send(const void*, size_t, DType, int peer, int tag) override;
  RequestPtr recv(void*, size_t, DType, int peer, int tag) override;
  void barrier() override {}
  std::unique_ptr<Comm> split(int, int) override { return std::make_unique<SelfComm>(); }
};

}  // namespace baton::dist
