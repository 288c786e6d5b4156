// DeviceComm: routes each Comm call to NCCL (device buffers) or MPI (host buffers) and orders the
// NCCL stream against the caller's compute stream with events (see device_comm.h for the rules).
// Compiled only when BATON_HAVE_NCCL (src/dist/CMakeLists.txt); device_comm_none.cpp otherwise.
#include "dist/device_comm.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "dist/nccl_comm.h"

namespace baton::dist {
namespace {

void check_cuda(cudaError_t rc, const char* what) {
  if (rc == cudaSuccess) return;
  throw Error(fmt::format("{} failed: {}", what, cudaGetErrorString(rc)),
              "check the GPU (nvidia-smi) and that each rank uses its own device");
}

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

// A Request that is already complete (zero-element calls).
class DoneRequest : public Request {
 public:
  void wait() override {}
  bool test() override { return true; }
};

// An async device collective: an event recorded on the NCCL stream after the operation.
class DeviceEventRequest : public Request {
 public:
  DeviceEventRequest(cudaStream_t nccl_stream, cudaStream_t compute) : compute_(compute) {
    check_cuda(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cudaEventRecord(event_, nccl_stream), "cudaEventRecord");
  }
  ~DeviceEventRequest() override { cudaEventDestroy(event_); }  // released once it completes
  DeviceEventRequest(const DeviceEventRequest&) = delete;
  DeviceEventRequest& operator=(const DeviceEventRequest&) = delete;

  // Device side only: later compute waits for the operation; the host goes on.
  void wait() override {
    if (waited_) return;
    check_cuda(cudaStreamWaitEvent(compute_, event_, 0), "cudaStreamWaitEvent");
    waited_ = true;
  }
  bool test() override {
    const cudaError_t rc = cudaEventQuery(event_);
    if (rc == cudaErrorNotReady) return false;
    check_cuda(rc, "cudaEventQuery");
    return true;
  }

 private:
  cudaEvent_t event_ = nullptr;
  cudaStream_t compute_;
  bool waited_ = false;
};

}  // namespace

// Pinned host buffers for staged point-to-point messages, reused by size. A buffer released after
// an asynchronous host->device copy carries a fence event: it is reused only once the copy is done.
struct DeviceStagingPool {
  struct Buffer {
    void* ptr = nullptr;
    size_t bytes = 0;
    cudaEvent_t fence = nullptr;
    bool fenced = false;  // `fence` was recorded after a copy that reads this buffer
    bool free = true;
  };

  DeviceStagingPool() = default;
  DeviceStagingPool(const DeviceStagingPool&) = delete;
  DeviceStagingPool& operator=(const DeviceStagingPool&) = delete;
  ~DeviceStagingPool() {
    // No throwing: may run while unwinding. Buffers still held by requests were leaked (below).
    for (auto& b : buffers_) {
      if (b->fenced) cudaEventSynchronize(b->fence);
      cudaEventDestroy(b->fence);
      cudaFreeHost(b->ptr);
    }
  }

  static constexpr size_t kGranule = size_t{64} << 10;  // allocations are multiples of 64 KiB

  // The smallest free buffer of at least `bytes` and at most twice that (plus a granule), else a
  // new one. Reuse waits (on the host) for the buffer's last host->device copy, normally long done.
  Buffer* acquire(size_t bytes) {
    Buffer* best = nullptr;
    for (auto& b : buffers_) {
      if (!b->free || b->bytes < bytes || b->bytes > 2 * bytes + kGranule) continue;
      if (!best || b->bytes < best->bytes ||
          (b->bytes == best->bytes && best->fenced && !b->fenced))
        best = b.get();
    }
    if (!best) {
      auto b = std::make_unique<Buffer>();
      b->bytes = std::max(kGranule, (bytes + kGranule - 1) / kGranule * kGranule);
      check_cuda(cudaMallocHost(&b->ptr, b->bytes), "cudaMallocHost (p2p staging)");
      const cudaError_t rc = cudaEventCreateWithFlags(&b->fence, cudaEventDisableTiming);
      if (rc != cudaSuccess) cudaFreeHost(b->ptr);
      check_cuda(rc, "cudaEventCreate");
      ++allocations_;
      buffers_.push_back(std::move(b));
      best = buffers_.back().get();
    }
    if (best->fenced) {
      check_cuda(cudaEventSynchronize(best->fence), "cudaEventSynchronize");
      best->fenced = false;
    }
    best->free = false;
    return best;
  }

  // Back to the pool; `copy_stream` (if any) has a pending copy out of the buffer.
  void release(Buffer* b, cudaStream_t copy_stream, bool has_copy) {
    if (has_copy) {
      check_cuda(cudaEventRecord(b->fence, copy_stream), "cudaEventRecord");
      b->fenced = true;
    }
    b->free = true;
  }

  // A request dropped before completion: MPI may still use the buffer, so it is never reused or
  // freed (as MpiComm leaks the MPI request itself).
  void leak(Buffer* b) {
    auto it = std::find_if(buffers_.begin(), buffers_.end(),
                           [&](const std::unique_ptr<Buffer>& p) { return p.get() == b; });
    if (it == buffers_.end()) return;
    (void)it->release();
    buffers_.erase(it);
  }

  size_t allocations() const { return allocations_; }
  size_t free_buffers() const {
    return static_cast<size_t>(std::count_if(buffers_.begin(), buffers_.end(),
                                             [](const std::unique_ptr<Buffer>& b) { return b->free; }));
  }

 private:
  std::vector<std::unique_ptr<Buffer>> buffers_;
  size_t allocations_ = 0;
};

namespace {

using Buffer = DeviceStagingPool::Buffer;

// A device send staged in pinned memory: complete when the MPI isend is.
class StagedSend : public Request {
 public:
  StagedSend(std::shared_ptr<DeviceStagingPool> pool, Buffer* buf, RequestPtr mpi)
      : pool_(std::move(pool)), buf_(buf), mpi_(std::move(mpi)) {}
  ~StagedSend() override {
    if (!done_) pool_->leak(buf_);
  }
  StagedSend(const StagedSend&) = delete;
  StagedSend& operator=(const StagedSend&) = delete;

  void wait() override {
    if (done_) return;
    mpi_->wait();  // BlockedTimer inside MpiComm's request
    finish();
  }
  bool test() override {
    if (!done_ && mpi_->test()) finish();
    return done_;
  }

 private:
  void finish() {
    pool_->release(buf_, nullptr, false);
    done_ = true;
  }
  std::shared_ptr<DeviceStagingPool> pool_;
  Buffer* buf_;
  RequestPtr mpi_;
  bool done_ = false;
};

// A device receive staged in pinned memory: when the MPI irecv completes, the copy to the device
// buffer is enqueued on the compute stream.
class StagedRecv : public Request {
 public:
  StagedRecv(std::shared_ptr<DeviceStagingPool> pool, Buffer* buf, RequestPtr mpi, void* dst,
             size_t bytes, cudaStream_t compute)
      : pool_(std::move(pool)), buf_(buf), mpi_(std::move(mpi)), dst_(dst), bytes_(bytes),
        compute_(compute) {}
  ~StagedRecv() override {
    if (!done_) pool_->leak(buf_);
  }
  StagedRecv(const StagedRecv&) = delete;
  StagedRecv& operator=(const StagedRecv&) = delete;

  void wait() override {
    if (done_) return;
    mpi_->wait();  // BlockedTimer inside; also checks the message length
    finish();
  }
  bool test() override {
    if (!done_ && mpi_->test()) finish();
    return done_;
  }
  bool cancel() override {
    if (done_) return false;
    if (!mpi_->cancel()) {  // a message had arrived: deliver it as wait() would
      finish();
      return false;
    }
    pool_->release(buf_, compute_, false);
    done_ = true;
    return true;
  }

 private:
  void finish() {
    check_cuda(cudaMemcpyAsync(dst_, buf_->ptr, bytes_, cudaMemcpyHostToDevice, compute_),
               "cudaMemcpyAsync (p2p staging to device)");
    pool_->release(buf_, compute_, true);
    done_ = true;
  }
  std::shared_ptr<DeviceStagingPool> pool_;
  Buffer* buf_;
  RequestPtr mpi_;
  void* dst_;
  size_t bytes_;
  cudaStream_t compute_;
  bool done_ = false;
};

}  // namespace

DeviceComm::DeviceComm(std::unique_ptr<Comm> mpi, std::unique_ptr<NcclComm> nccl,
                       void* compute_stream)
    : mpi_(std::move(mpi)), nccl_(std::move(nccl)), compute_(compute_stream),
      pool_(std::make_shared<DeviceStagingPool>()) {
  BATON_ASSERT(mpi_ && nccl_, "DeviceComm needs both an MPI and an NCCL communicator");
  BATON_ASSERT(mpi_->backend() == "mpi", "DeviceComm's host communicator is {}, not mpi",
               mpi_->backend());
  BATON_ASSERT(mpi_->rank() == nccl_->rank() && mpi_->size() == nccl_->size(),
               "DeviceComm: MPI rank {}/{} but NCCL rank {}/{}", mpi_->rank(), mpi_->size(),
               nccl_->rank(), nccl_->size());
}

DeviceComm::~DeviceComm() {
  // NCCL first (its destructor drains its stream), then MPI; the pool lives on in any request
  // still outstanding.
  nccl_.reset();
  mpi_.reset();
}

int DeviceComm::rank() const { return mpi_->rank(); }
int DeviceComm::size() const { return mpi_->size(); }
size_t DeviceComm::staging_allocations() const { return pool_->allocations(); }
size_t DeviceComm::staging_buffers_free() const { return pool_->free_buffers(); }

bool DeviceComm::on_device(const void* p) const {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();  // older drivers report plain host memory as an error: host
    return false;
  }
  if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged) return false;
  BATON_ASSERT(a.type == cudaMemoryTypeManaged || a.device == nccl_->device(),
               "buffer on CUDA device {} passed to a communicator on device {}", a.device,
               nccl_->device());
  return true;
}

bool DeviceComm::on_device(const void* a, const void* b, const char* what) const {
  const bool da = on_device(a), db = on_device(b);
  BATON_ASSERT(da == db, "{}: send buffer is in {} memory but receive buffer in {} memory", what,
               da ? "device" : "host", db ? "device" : "host");
  return da;
}

void DeviceComm::before_nccl() { nccl_->wait_for(as_stream(compute_)); }
void DeviceComm::after_nccl() { nccl_->block(as_stream(compute_)); }

RequestPtr DeviceComm::nccl_request() {
  return std::make_unique<DeviceEventRequest>(nccl_->stream(), as_stream(compute_));
}

template <class Host, class Device>
void DeviceComm::collective(bool on_device, Host host, Device device) {
  if (!on_device) {
    route(Route::HOST_MPI);
    return host();
  }
  route(Route::NCCL);
  before_nccl();
  device();
  after_nccl();
}

template <class Host, class Device>
RequestPtr DeviceComm::collective_async(bool on_device, Host host, Device device) {
  if (!on_device) {
    route(Route::HOST_MPI);
    return host();
  }
  route(Route::NCCL);
  before_nccl();
  device();
  return nccl_request();
}

// Zero-element collectives are skipped on every rank alike (counts agree across ranks), before the
// buffer is looked at: a zero-length buffer may be a null pointer on one rank and not another.
void DeviceComm::all_reduce(void* buf, size_t count, DType dtype, ReduceOp op) {
  if (count == 0) return route(Route::NONE);
  collective(
      on_device(buf), [&] { mpi_->all_reduce(buf, count, dtype, op); },
      [&] { nccl_->all_reduce(buf, count, dtype, op); });
}

RequestPtr DeviceComm::all_reduce_async(void* buf, size_t count, DType dtype, ReduceOp op) {
  if (count == 0) {
    route(Route::NONE);
    return std::make_unique<DoneRequest>();
  }
  return collective_async(
      on_device(buf), [&] { return mpi_->all_reduce_async(buf, count, dtype, op); },
      [&] { nccl_->all_reduce(buf, count, dtype, op); });
}

void DeviceComm::reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype,
                                ReduceOp op) {
  if (recv_count == 0) return route(Route::NONE);
  collective(
      on_device(send, recv, "reduce_scatter"),
      [&] { mpi_->reduce_scatter(send, recv, recv_count, dtype, op); },
      [&] { nccl_->reduce_scatter(send, recv, recv_count, dtype, op); });
}

RequestPtr DeviceComm::reduce_scatter_async(const void* send, void* recv, size_t recv_count,
                                            DType dtype, ReduceOp op) {
  if (recv_count == 0) {
    route(Route::NONE);
    return std::make_unique<DoneRequest>();
  }
  return collective_async(
      on_device(send, recv, "reduce_scatter_async"),
      [&] { return mpi_->reduce_scatter_async(send, recv, recv_count, dtype, op); },
      [&] { nccl_->reduce_scatter(send, recv, recv_count, dtype, op); });
}

void DeviceComm::all_gather(const void* send, void* recv, size_t send_count, DType dtype) {
  if (send_count == 0) return route(Route::NONE);
  collective(
      on_device(send, recv, "all_gather"),
      [&] { mpi_->all_gather(send, recv, send_count, dtype); },
      [&] { nccl_->all_gather(send, recv, send_count, dtype); });
}

void DeviceComm::broadcast(void* buf, size_t count, DType dtype, int root) {
  BATON_ASSERT(root >= 0 && root < size(), "broadcast root {} outside group of {}", root, size());
  if (count == 0) return route(Route::NONE);
  collective(
      on_device(buf), [&] { mpi_->broadcast(buf, count, dtype, root); },
      [&] { nccl_->broadcast(buf, count, dtype, root); });
}

// Zero-element messages still go through MPI (unstaged: nothing is read or written), so both ends
// match by tag whatever the pointers are.
RequestPtr DeviceComm::send(const void* buf, size_t count, DType dtype, int peer, int tag) {
  if (count == 0 || !on_device(buf)) {
    route(Route::HOST_MPI);
    return mpi_->send(buf, count, dtype, peer, tag);
  }
  route(Route::STAGED_MPI);
  const size_t bytes = count * dtype_size(dtype);
  Buffer* b = pool_->acquire(bytes);
  try {
    // Ordered after the compute that produced `buf`; the host waits for it (not counted as
    // blocked communication: it is the compute this rank must finish before sending).
    check_cuda(cudaMemcpyAsync(b->ptr, buf, bytes, cudaMemcpyDeviceToHost, as_stream(compute_)),
               "cudaMemcpyAsync (device to p2p staging)");
    check_cuda(cudaStreamSynchronize(as_stream(compute_)), "cudaStreamSynchronize");
    return std::make_unique<StagedSend>(pool_, b, mpi_->send(b->ptr, count, dtype, peer, tag));
  } catch (...) {
    pool_->release(b, nullptr, false);
    throw;
  }
}

RequestPtr DeviceComm::recv(void* buf, size_t count, DType dtype, int peer, int tag) {
  if (count == 0 || !on_device(buf)) {
    route(Route::HOST_MPI);
    return mpi_->recv(buf, count, dtype, peer, tag);
  }
  route(Route::STAGED_MPI);
  const size_t bytes = count * dtype_size(dtype);
  Buffer* b = pool_->acquire(bytes);
  try {
    RequestPtr r = mpi_->recv(b->ptr, count, dtype, peer, tag);
    return std::make_unique<StagedRecv>(pool_, b, std::move(r), buf, bytes, as_stream(compute_));
  } catch (...) {
    pool_->release(b, nullptr, false);
    throw;
  }
}

void DeviceComm::barrier() {
  route(Route::HOST_MPI);
  mpi_->barrier();
}

void DeviceComm::synchronize() {
  {
    BlockedTimer blocked;
    nccl_->synchronize();
  }
  check_cuda(cudaStreamSynchronize(as_stream(compute_)), "cudaStreamSynchronize");
}

double DeviceComm::all_reduce_host_scalar(double x, ReduceOp op) {
  route(Route::HOST_MPI);
  return mpi_->all_reduce_scalar(x, op);
}

std::unique_ptr<Comm> DeviceComm::split(int color, int key) {
  BATON_ASSERT(color >= 0, "split color {} must be non-negative", color);
  std::unique_ptr<Comm> mpi = mpi_->split(color, key);
  std::unique_ptr<Comm> nccl = nccl_->split(color, key);
  auto* typed = dynamic_cast<NcclComm*>(nccl.get());
  BATON_ASSERT(typed, "NcclComm::split returned a {} communicator", nccl->backend());
  (void)nccl.release();
  return std::make_unique<DeviceComm>(std::move(mpi), std::unique_ptr<NcclComm>(typed), compute_);
}

bool device_comm_available() { return true; }

std::unique_ptr<Comm> make_device_comm(std::unique_ptr<Comm> mpi, int cuda_device,
                                       void* compute_stream) {
  BATON_ASSERT(mpi, "make_device_comm needs an MPI communicator");
  BATON_ASSERT(mpi->backend() == "mpi", "make_device_comm needs an MPI communicator, got {}",
               mpi->backend());
  std::unique_ptr<Comm> nccl = make_nccl_comm(*mpi, cuda_device);
  auto* typed = dynamic_cast<NcclComm*>(nccl.get());
  BATON_ASSERT(typed, "make_nccl_comm returned a {} communicator", nccl->backend());
  (void)nccl.release();
  return std::make_unique<DeviceComm>(std::move(mpi), std::unique_ptr<NcclComm>(typed),
                                      compute_stream);
}

}  // namespace baton::dist
