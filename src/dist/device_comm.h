// DeviceComm: the dist::Comm GPU training uses for data, tensor and pipeline parallelism. It routes
// every call by where its buffers live, because the trainer hands the same communicator both host
// pointers (loss / norm statistics, checkpoint metadata) and device pointers (activations,
// gradients, parameters):
// - device (or managed) memory -> collectives on an NCCL communicator with its own stream;
// - host memory (pageable or pinned) -> the MPI communicator over the same ranks, same order.
// One call mixing host and device buffers is a precondition failure (BATON_ASSERT). Every rank must
// pass the same kind of memory to a given call, or the ranks take different transports and hang.
//
// Ordering against compute (`compute_stream`, given at construction; nullptr = legacy stream):
// - Device collectives: the NCCL stream first waits for the work enqueued so far on the compute
//   stream (an event, no host wait). After a blocking call (all_reduce, reduce_scatter,
//   all_gather, broadcast) the compute stream waits for the NCCL stream, so later compute sees the
//   result; the host never blocks. Communication overlaps compute only through the async forms:
//   their Request::wait() makes the compute stream wait for that operation (device side, the host
//   does not block) and Request::test() polls its event. After wait(), test() still reports
//   whether the operation has finished on the device.
// - Device point-to-point (send/recv; the pipeline executor posts receives early and sends later,
//   with MPI's non-blocking semantics) is staged through pinned host memory over MPI: send()
//   copies the buffer to a staging buffer on the compute stream, waits for that copy on the host
//   (so the data is whatever compute produced before the call) and starts an MPI isend; the
//   device buffer may be reused as soon as send() returns. recv() starts an MPI irecv into staging;
//   its wait() (or a test() that finds it complete) finishes the MPI request and enqueues the copy
//   to the device buffer on the compute stream, before any later compute. Staging buffers come
//   from a per-communicator pool of cudaMallocHost buffers reused by size: no allocation per
//   message after warm-up.
//   KNOWN PERFORMANCE LIMITATION: pipeline messages go through host memory (a device->host copy,
//   a host synchronisation of the compute stream per send, MPI, a host->device copy); grouped NCCL
//   p2p (ncclGroupStart/End over each schedule step's sends and receives) is the next step.
// - group_begin/group_end are no-ops (point-to-point is MPI, already non-blocking).
// - barrier() is an MPI barrier (host rendezvous). synchronize() blocks the host until everything
//   enqueued on the NCCL stream and the compute stream has finished.
// - Blocking time is counted in blocked_seconds() (MPI calls and waits, synchronize()'s wait for
//   the NCCL stream); the host wait for compute before a staged send is compute, not counted.
// - Several DeviceComms (tp, dp, pp groups) each have their own NCCL stream; as with any use of
//   several NCCL communicators on one GPU, every rank must issue their collectives in the same
//   order (the trainer's schedule is deterministic, so it does).
//
// This header has no CUDA types and may be included by code built without CUDA; the DeviceComm
// class itself exists only when BATON_HAVE_NCCL (a PUBLIC definition of baton_dist).
#pragma once
#include <cstdint>
#include <memory>

#include "dist/comm.h"

namespace baton::dist {

// True when this build has NCCL, i.e. make_device_comm can build a communicator.
bool device_comm_available();

// Collective over `mpi` (an MPI communicator, "mpi" backend): builds an NCCL communicator of the
// same ranks on `cuda_device` (make_nccl_comm) and returns a DeviceComm owning both.
// `compute_stream` is a cudaStream_t (nullptr: the legacy default stream) on which the caller
// enqueues the compute that produces and consumes device buffers; it must outlive the result and
// its splits. Without NCCL in the build this throws baton::Error.
std::unique_ptr<Comm> make_device_comm(std::unique_ptr<Comm> mpi, int cuda_device,
                                       void* compute_stream);

#if BATON_HAVE_NCCL

class NcclComm;           // nccl_comm.h (CUDA types)
struct DeviceStagingPool;  // device_comm.cpp

class DeviceComm : public Comm {
 public:
  // Which transport the most recent call took (for tests and diagnostics).
  enum class Route : uint8_t {
    NONE,       // nothing moved (zero elements) or no call yet
    HOST_MPI,   // host buffers, MPI
    NCCL,       // device buffers, NCCL collective on the NCCL stream
    STAGED_MPI  // device buffers, point-to-point staged through pinned host memory over MPI
  };

  // Takes both communicators (same ranks, same order). Use make_device_comm.
  DeviceComm(std::unique_ptr<Comm> mpi, std::unique_ptr<NcclComm> nccl, void* compute_stream);
  ~DeviceComm() override;
  DeviceComm(const DeviceComm&) = delete;
  DeviceComm& operator=(const DeviceComm&) = delete;

  Comm& mpi() { return *mpi_; }
  NcclComm& nccl() { return *nccl_; }
  void* compute_stream() const { return compute_; }  // a cudaStream_t
  Route last_route() const { return last_route_; }
  uint64_t route_count(Route r) const { return counts_[static_cast<int>(r)]; }
  size_t staging_allocations() const;  // cudaMallocHost calls of the staging pool so far
  size_t staging_buffers_free() const;  // pooled buffers not held by a request

  int rank() const override;
  int size() const override;
  std::string backend() const override { return "nccl+mpi"; }

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
  void synchronize() override;
  // Splits both communicators with the same color and key; the result shares the compute stream.
  std::unique_ptr<Comm> split(int color, int key) override;
  MPI_Comm mpi_handle() const override { return mpi_->mpi_handle(); }

 protected:
  double all_reduce_host_scalar(double x, ReduceOp op) override;  // MPI

 private:
  bool on_device(const void* p) const;
  bool on_device(const void* a, const void* b, const char* what) const;
  void route(Route r) {
    last_route_ = r;
    ++counts_[static_cast<int>(r)];
  }
  void before_nccl();  // the NCCL stream waits for the compute stream
  void after_nccl();   // the compute stream waits for the NCCL stream
  RequestPtr nccl_request();
  // A collective by where its buffers are: `host()` on MPI, or `device()` on NCCL ordered against
  // the compute stream (blocking: compute waits after; async: a request that makes it wait).
  template <class Host, class Device>
  void collective(bool on_device, Host host, Device device);
  template <class Host, class Device>
  RequestPtr collective_async(bool on_device, Host host, Device device);

  std::unique_ptr<Comm> mpi_;
  std::unique_ptr<NcclComm> nccl_;
  void* compute_ = nullptr;
  std::shared_ptr<DeviceStagingPool> pool_;  // shared with outstanding staged requests
  Route last_route_ = Route::NONE;
  uint64_t counts_[4] = {0, 0, 0, 0};
};

#endif  // BATON_HAVE_NCCL

}  // namespace baton::dist
