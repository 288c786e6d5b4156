// NcclComm: each Comm call is one NCCL call enqueued on the communicator's stream (see
// nccl_comm.h for the stream and request semantics).
#include "dist/nccl_comm.h"

#include "core/error.h"

namespace baton::dist {
namespace {

void check_cuda(cudaError_t rc, const char* what) {
  if (rc == cudaSuccess) return;
  throw Error(fmt::format("{} failed: {}", what, cudaGetErrorString(rc)),
              "check the GPU (nvidia-smi) and that each rank uses its own device");
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::F64: return ncclFloat64;
    case DType::I32: return ncclInt32;
    case DType::I64: return ncclInt64;
    case DType::BF16: return ncclBfloat16;
    case DType::U8: return ncclUint8;
  }
  BATON_ASSERT(false, "unknown DType {}", static_cast<int>(t));
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp r) {
  switch (r) {
    case ReduceOp::SUM: return ncclSum;
    case ReduceOp::MAX: return ncclMax;
    case ReduceOp::MIN: return ncclMin;
  }
  BATON_ASSERT(false, "unknown ReduceOp {}", static_cast<int>(r));
  return ncclSum;
}

}  // namespace

// A request's completion event: recorded at once, or at group_end for requests made in a group.
struct NcclEventSlot {
  cudaEvent_t event = nullptr;
  bool recorded = false;
  NcclEventSlot() {
    check_cuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate");
  }
  ~NcclEventSlot() { cudaEventDestroy(event); }
  NcclEventSlot(const NcclEventSlot&) = delete;
  NcclEventSlot& operator=(const NcclEventSlot&) = delete;
  void record(cudaStream_t s) {
    check_cuda(cudaEventRecord(event, s), "cudaEventRecord");
    recorded = true;
  }
};

namespace {

class NcclRequest : public Request {
 public:
  explicit NcclRequest(std::shared_ptr<NcclEventSlot> slot) : slot_(std::move(slot)) {}
  void wait() override {
    BATON_ASSERT(slot_->recorded, "wait() on an NCCL request before group_end()");
    check_cuda(cudaEventSynchronize(slot_->event), "cudaEventSynchronize");
  }
  bool test() override {
    if (!slot_->recorded) return false;
    cudaError_t rc = cudaEventQuery(slot_->event);
    if (rc == cudaErrorNotReady) return false;
    check_cuda(rc, "cudaEventQuery");
    return true;
  }

 private:
  std::shared_ptr<NcclEventSlot> slot_;  // shared with the comm's pending list inside a group
};

}  // namespace

void NcclComm::check(ncclResult_t rc, const char* what) const {
  if (rc == ncclSuccess) return;
  const char* last = comm_ ? ncclGetLastError(comm_) : nullptr;
  throw Error(fmt::format("{} failed: {}{}{}", what, ncclGetErrorString(rc),
                          last && *last ? ": " : "", last ? last : ""),
              "rerun with NCCL_DEBUG=INFO to see NCCL's view of the failure");
}

NcclComm::NcclComm(ncclComm_t comm, int cuda_device, std::unique_ptr<Comm> bootstrap)
    : comm_(comm), device_(cuda_device), bootstrap_(std::move(bootstrap)) {
  check(ncclCommUserRank(comm_, &rank_), "ncclCommUserRank");
  check(ncclCommCount(comm_, &size_), "ncclCommCount");
  BATON_ASSERT(bootstrap_ && bootstrap_->rank() == rank_ && bootstrap_->size() == size_,
               "NCCL communicator and its MPI bootstrap disagree on rank/size");
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  // Blocking stream on purpose: ordered against the legacy default stream (nccl_comm.h).
  check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamDefault), "cudaStreamCreate");
  check_cuda(cudaEventCreateWithFlags(&order_event_, cudaEventDisableTiming), "cudaEventCreate");
  check_cuda(cudaMalloc(&scratch_, sizeof(double)), "cudaMalloc");
}

NcclComm::~NcclComm() {
  // No throwing here: a destructor may run while unwinding from another error.
  if (stream_) cudaStreamSynchronize(stream_);
  if (comm_) ncclCommDestroy(comm_);
  if (scratch_) cudaFree(scratch_);
  if (order_event_) cudaEventDestroy(order_event_);
  if (stream_) cudaStreamDestroy(stream_);
}

void NcclComm::wait_for(cudaStream_t producer) {
  check_cuda(cudaEventRecord(order_event_, producer), "cudaEventRecord");
  check_cuda(cudaStreamWaitEvent(stream_, order_event_, 0), "cudaStreamWaitEvent");
}

void NcclComm::block(cudaStream_t consumer) {
  check_cuda(cudaEventRecord(order_event_, stream_), "cudaEventRecord");
  check_cuda(cudaStreamWaitEvent(consumer, order_event_, 0), "cudaStreamWaitEvent");
}

RequestPtr NcclComm::make_request() {
  auto slot = std::make_shared<NcclEventSlot>();
  if (group_depth_ > 0)
    pending_.push_back(slot);
  else
    slot->record(stream_);
  return std::make_unique<NcclRequest>(std::move(slot));
}

// Zero-element calls are skipped: counts agree on every rank (and on both ends of a send/recv),
// so every participant skips together.
void NcclComm::all_reduce(void* buf, size_t count, DType dtype, ReduceOp op) {
  if (count == 0) return;
  check(ncclAllReduce(buf, buf, count, nccl_type(dtype), nccl_op(op), comm_, stream_),
        "ncclAllReduce");
}

RequestPtr NcclComm::all_reduce_async(void* buf, size_t count, DType dtype, ReduceOp op) {
  all_reduce(buf, count, dtype, op);
  return make_request();
}

void NcclComm::reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype,
                              ReduceOp op) {
  if (recv_count == 0) return;
  check(ncclReduceScatter(send, recv, recv_count, nccl_type(dtype), nccl_op(op), comm_, stream_),
        "ncclReduceScatter");
}

RequestPtr NcclComm::reduce_scatter_async(const void* send, void* recv, size_t recv_count,
                                          DType dtype, ReduceOp op) {
  reduce_scatter(send, recv, recv_count, dtype, op);
  return make_request();
}

void NcclComm::all_gather(const void* send, void* recv, size_t send_count, DType dtype) {
  if (send_count == 0) return;
  // NCCL's in-place all-gather has exactly comm.h's convention: send == recv + rank * count.
  check(ncclAllGather(send, recv, send_count, nccl_type(dtype), comm_, stream_), "ncclAllGather");
}

void NcclComm::broadcast(void* buf, size_t count, DType dtype, int root) {
  BATON_ASSERT(root >= 0 && root < size_, "broadcast root {} outside group of {}", root, size_);
  if (count == 0) return;
  check(ncclBroadcast(buf, buf, count, nccl_type(dtype), root, comm_, stream_), "ncclBroadcast");
}

// NCCL matches point-to-point messages by order per peer, not by tag; the tag is accepted for
// interface compatibility and schedules must already pair sends and receives in order.
RequestPtr NcclComm::send(const void* buf, size_t count, DType dtype, int peer, int /*tag*/) {
  BATON_ASSERT(peer >= 0 && peer < size_, "send to rank {} outside group of {}", peer, size_);
  if (count > 0) check(ncclSend(buf, count, nccl_type(dtype), peer, comm_, stream_), "ncclSend");
  return make_request();
}

RequestPtr NcclComm::recv(void* buf, size_t count, DType dtype, int peer, int /*tag*/) {
  BATON_ASSERT(peer >= 0 && peer < size_, "recv from rank {} outside group of {}", peer, size_);
  if (count > 0) check(ncclRecv(buf, count, nccl_type(dtype), peer, comm_, stream_), "ncclRecv");
  return make_request();
}

void NcclComm::group_begin() {
  check(ncclGroupStart(), "ncclGroupStart");
  ++group_depth_;
}

void NcclComm::group_end() {
  BATON_ASSERT(group_depth_ > 0, "group_end() without group_begin()");
  check(ncclGroupEnd(), "ncclGroupEnd");
  if (--group_depth_ > 0) return;
  // Only now has NCCL enqueued the group's work, so only now do the events mean completion.
  for (auto& slot : pending_) slot->record(stream_);
  pending_.clear();
}

void NcclComm::barrier() {
  BATON_ASSERT(group_depth_ == 0, "barrier() inside group_begin()/group_end()");
  all_reduce(scratch_, 1, DType::F64, ReduceOp::SUM);
  synchronize();
}

void NcclComm::synchronize() { check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

double NcclComm::all_reduce_host_scalar(double x, ReduceOp op) {
  BATON_ASSERT(group_depth_ == 0, "all_reduce_scalar() inside group_begin()/group_end()");
  check_cuda(cudaMemcpyAsync(scratch_, &x, sizeof x, cudaMemcpyHostToDevice, stream_),
             "cudaMemcpyAsync");
  all_reduce(scratch_, 1, DType::F64, op);
  check_cuda(cudaMemcpyAsync(&x, scratch_, sizeof x, cudaMemcpyDeviceToHost, stream_),
             "cudaMemcpyAsync");
  synchronize();
  return x;
}

std::unique_ptr<Comm> NcclComm::split(int color, int key) {
  BATON_ASSERT(color >= 0, "split color {} must be non-negative", color);
  BATON_ASSERT(group_depth_ == 0, "split() inside group_begin()/group_end()");
  std::unique_ptr<Comm> boot = bootstrap_->split(color, key);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
  ncclComm_t out = nullptr;
  check(ncclCommSplit(comm_, color, key, &out, nullptr), "ncclCommSplit");
  return std::make_unique<NcclComm>(out, device_, std::move(boot));
#else
  return make_nccl_comm(*boot, device_);  // new unique id over the split MPI group
#endif
}

std::unique_ptr<Comm> make_nccl_comm(Comm& mpi_bootstrap, int cuda_device) {
  BATON_ASSERT(mpi_bootstrap.backend() == "mpi",
               "make_nccl_comm needs a host (MPI) communicator to bootstrap, got {}",
               mpi_bootstrap.backend());
  int devices = 0;
  check_cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  BATON_REQUIRE(cuda_device >= 0 && cuda_device < devices,
                fmt::format("CUDA device {} requested but this node has {}", cuda_device, devices),
                "launch at most one rank per GPU on each node (e.g. --ntasks-per-node = GPUs)");
  check_cuda(cudaSetDevice(cuda_device), "cudaSetDevice");
  ncclUniqueId id{};
  if (mpi_bootstrap.rank() == 0) {
    ncclResult_t rc = ncclGetUniqueId(&id);
    BATON_REQUIRE(rc == ncclSuccess, fmt::format("ncclGetUniqueId failed: {}", ncclGetErrorString(rc)),
                  "rerun with NCCL_DEBUG=INFO to see NCCL's view of the failure");
  }
  mpi_bootstrap.broadcast(&id, sizeof id, DType::U8, 0);
  ncclComm_t comm = nullptr;
  ncclResult_t rc = ncclCommInitRank(&comm, mpi_bootstrap.size(), id, mpi_bootstrap.rank());
  BATON_REQUIRE(rc == ncclSuccess, fmt::format("ncclCommInitRank failed: {}", ncclGetErrorString(rc)),
                "rerun with NCCL_DEBUG=INFO; every rank of the group must reach this call");
  // Keep a private copy of the MPI group for later splits (nccl_comm.h).
  return std::make_unique<NcclComm>(comm, cuda_device, mpi_bootstrap.split(0, mpi_bootstrap.rank()));
}

}  // namespace baton::dist
