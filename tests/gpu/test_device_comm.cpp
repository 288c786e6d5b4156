// DeviceComm on a real GPU: routing by buffer location (host -> MPI, device -> NCCL, device p2p ->
// staged MPI), ordering against a non-blocking compute stream without kernels (cudaMemsetAsync,
// the collective, cudaMemcpyAsync back, 100 rounds with different values), async collectives whose
// wait() orders the compute stream, self/ring send/recv through staging with the receive posted
// first (as the pipeline executor does), the staging pool not allocating after warm-up, split and
// host scalars. Written for any number of ranks (one GPU each, device = rank % devices); ctest runs
// it as a one-rank job. Without a CUDA device every test prints "skipped: no CUDA device" and is
// skipped.
#include "../support/gpu_test.h"
#include "dist/device_comm.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <vector>

#include "core/error.h"
#include "dist/nccl_comm.h"

namespace baton::dist {
namespace {

using Route = DeviceComm::Route;

int cuda_devices() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;  // no driver or no device: zero devices
  return n;
}

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

class DeviceBytes {
 public:
  explicit DeviceBytes(size_t bytes) : bytes_(bytes) {
    if (cudaMalloc(&ptr_, bytes_) != cudaSuccess) throw std::bad_alloc();
  }
  ~DeviceBytes() { cudaFree(ptr_); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  uint8_t* get() { return static_cast<uint8_t*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
};

class DeviceCommTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (cuda_devices() == 0) {
      std::printf("skipped: no CUDA device\n");
      return;
    }
    auto world = MpiRuntime::world();
    const int device = world->rank() % cuda_devices();
    if (cudaSetDevice(device) != cudaSuccess) return;
    // Non-blocking: not ordered against the legacy stream, so only DeviceComm's events order it
    // against the NCCL stream.
    if (cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking) != cudaSuccess) return;
    comm_ = make_device_comm(std::move(world), device, compute_).release();
    dev_ = dynamic_cast<DeviceComm*>(comm_);
  }
  static void TearDownTestSuite() {
    delete comm_;  // before MPI_Finalize (main)
    comm_ = nullptr;
    dev_ = nullptr;
    if (compute_) cudaStreamDestroy(compute_);
    compute_ = nullptr;
  }
  void SetUp() override {
    BATON_GPU_TEST_OR_SKIP();
    ASSERT_NE(comm_, nullptr) << "a CUDA device is present but the communicator was not made (cudaSetDevice, the stream or make_device_comm failed)";
    ASSERT_NE(dev_, nullptr);
  }
  // Host copy of `n` device bytes, read on the compute stream (ordered after everything before).
  static std::vector<uint8_t> read_back(const uint8_t* d, size_t n) {
    std::vector<uint8_t> h(n, 0);
    EXPECT_EQ(cudaMemcpyAsync(h.data(), d, n, cudaMemcpyDeviceToHost, compute_), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(compute_), cudaSuccess);
    return h;
  }
  static bool all_equal(const std::vector<uint8_t>& h, uint8_t v) {
    for (uint8_t x : h)
      if (x != v) return false;
    return true;
  }
  static Comm* comm_;
  static DeviceComm* dev_;
  static cudaStream_t compute_;
};
Comm* DeviceCommTest::comm_ = nullptr;
DeviceComm* DeviceCommTest::dev_ = nullptr;
cudaStream_t DeviceCommTest::compute_ = nullptr;

TEST_F(DeviceCommTest, Basics) {
  EXPECT_TRUE(device_comm_available());
  EXPECT_EQ(comm_->backend(), "nccl+mpi");
  EXPECT_EQ(comm_->rank(), dev_->mpi().rank());
  EXPECT_EQ(comm_->size(), dev_->nccl().size());
  EXPECT_EQ(dev_->compute_stream(), static_cast<void*>(compute_));
  comm_->barrier();
  comm_->synchronize();
}

TEST_F(DeviceCommTest, RoutesByBufferLocation) {
  const int p = comm_->size();
  // Pageable host memory -> MPI.
  double h[2] = {1, 2};
  comm_->all_reduce(h, 2, DType::F64, ReduceOp::SUM);
  EXPECT_EQ(dev_->last_route(), Route::HOST_MPI);
  EXPECT_EQ(h[0], p);
  EXPECT_EQ(h[1], 2.0 * p);
  // Pinned host memory is still host memory -> MPI.
  double* pinned = nullptr;
  CUDA_OK(cudaMallocHost(&pinned, sizeof(double)));
  *pinned = 3;
  comm_->all_reduce(pinned, 1, DType::F64, ReduceOp::MAX);
  EXPECT_EQ(dev_->last_route(), Route::HOST_MPI);
  EXPECT_EQ(*pinned, 3);
  cudaFreeHost(pinned);
  // Device memory -> NCCL.
  const uint64_t nccl_before = dev_->route_count(Route::NCCL);
  DeviceBytes d(4096);
  CUDA_OK(cudaMemsetAsync(d.get(), 7, d.bytes(), compute_));
  comm_->all_reduce(d.get(), d.bytes(), DType::U8, ReduceOp::MAX);
  EXPECT_EQ(dev_->last_route(), Route::NCCL);
  EXPECT_EQ(dev_->route_count(Route::NCCL), nccl_before + 1);
  EXPECT_TRUE(all_equal(read_back(d.get(), d.bytes()), 7));
  // Managed memory -> NCCL.
  uint8_t* managed = nullptr;
  CUDA_OK(cudaMallocManaged(&managed, 256));
  CUDA_OK(cudaMemsetAsync(managed, 9, 256, compute_));
  comm_->all_reduce(managed, 256, DType::U8, ReduceOp::MAX);
  EXPECT_EQ(dev_->last_route(), Route::NCCL);
  EXPECT_TRUE(all_equal(read_back(managed, 256), 9));
  cudaFree(managed);
  // Host scalars -> MPI.
  EXPECT_EQ(comm_->all_reduce_scalar(1.0), p);
  EXPECT_EQ(dev_->last_route(), Route::HOST_MPI);
  // Zero elements move nothing.
  comm_->all_reduce(nullptr, 0, DType::F32, ReduceOp::SUM);
  EXPECT_EQ(dev_->last_route(), Route::NONE);
  // Mixing host and device in one call is a precondition failure (every rank throws alike).
  std::vector<uint8_t> host(4096 * p);
  EXPECT_THROW(comm_->all_gather(d.get(), host.data(), d.bytes(), DType::U8), Error);
  EXPECT_THROW(comm_->reduce_scatter(host.data(), d.get(), d.bytes(), DType::U8, ReduceOp::SUM),
               Error);
}

// memset on the compute stream -> collective -> copy back on the compute stream, no host sync in
// between: the copy must see the collective's result of this round's value. MAX of equal values is
// the value at any rank count.
TEST_F(DeviceCommTest, OrderingAgainstComputeStream) {
  const int p = comm_->size(), r = comm_->rank();
  const size_t n = size_t{8} << 20;
  DeviceBytes buf(n), gathered(n * p), scattered(n);
  for (int round = 0; round < 100; ++round) {
    const uint8_t v = static_cast<uint8_t>(1 + round % 250);
    CUDA_OK(cudaMemsetAsync(buf.get(), v, n, compute_));
    comm_->all_reduce(buf.get(), n, DType::U8, ReduceOp::MAX);
    ASSERT_EQ(dev_->last_route(), Route::NCCL);
    ASSERT_TRUE(all_equal(read_back(buf.get(), n), v)) << "all_reduce round " << round;

    // Out of place, so a collective that ran before the memset would leave old values behind.
    const uint8_t w = static_cast<uint8_t>(255 - round);
    CUDA_OK(cudaMemsetAsync(gathered.get(), w, n * p, compute_));
    comm_->reduce_scatter(gathered.get(), scattered.get(), n, DType::U8, ReduceOp::MAX);
    ASSERT_TRUE(all_equal(read_back(scattered.get(), n), w)) << "reduce_scatter round " << round;

    CUDA_OK(cudaMemsetAsync(buf.get(), v, n, compute_));
    CUDA_OK(cudaMemsetAsync(gathered.get(), 0, n * p, compute_));
    comm_->all_gather(buf.get(), gathered.get(), n, DType::U8);
    ASSERT_TRUE(all_equal(read_back(gathered.get(), n * p), v)) << "all_gather round " << round;

    CUDA_OK(cudaMemsetAsync(buf.get(), r == round % p ? w : 0, n, compute_));
    comm_->broadcast(buf.get(), n, DType::U8, round % p);
    ASSERT_TRUE(all_equal(read_back(buf.get(), n), w)) << "broadcast round " << round;
  }
}

// Async: the host is not blocked; wait() orders the compute stream after the operation.
TEST_F(DeviceCommTest, AsyncWaitOrdersComputeStream) {
  const int p = comm_->size();
  const size_t n = size_t{4} << 20;
  DeviceBytes a(n), b(n * p), c(n);
  for (int round = 0; round < 20; ++round) {
    const uint8_t v = static_cast<uint8_t>(10 + round);
    CUDA_OK(cudaMemsetAsync(a.get(), v, n, compute_));
    CUDA_OK(cudaMemsetAsync(b.get(), static_cast<uint8_t>(v + 1), n * p, compute_));
    RequestPtr qa = comm_->all_reduce_async(a.get(), n, DType::U8, ReduceOp::MAX);
    EXPECT_EQ(dev_->last_route(), Route::NCCL);
    RequestPtr qb = comm_->reduce_scatter_async(b.get(), c.get(), n, DType::U8, ReduceOp::MAX);
    qa->test();  // polling is allowed any time
    qa->wait();
    qb->wait();
    ASSERT_TRUE(all_equal(read_back(a.get(), n), v)) << "round " << round;
    ASSERT_TRUE(all_equal(read_back(c.get(), n), static_cast<uint8_t>(v + 1))) << "round " << round;
    EXPECT_TRUE(qa->test());  // the compute stream (synchronised above) waited for it
    EXPECT_TRUE(qb->test());
  }
  // Host buffers take MPI's asynchronous path.
  double x = 1;
  RequestPtr q = comm_->all_reduce_async(&x, 1, DType::F64, ReduceOp::SUM);
  EXPECT_EQ(dev_->last_route(), Route::HOST_MPI);
  q->wait();
  EXPECT_EQ(x, p);
}

// Ring exchange (self send/recv in a one-rank job) through pinned staging, receive posted first.
TEST_F(DeviceCommTest, StagedSendRecv) {
  const int r = comm_->rank(), p = comm_->size();
  const int next = (r + 1) % p, prev = (r + p - 1) % p;
  const size_t n = (size_t{3} << 20) + 123;  // not a multiple of the pool's granule
  DeviceBytes src(n), dst(n);
  size_t allocations_after_warmup = 0;
  for (int round = 0; round < 50; ++round) {
    const uint8_t v = static_cast<uint8_t>(r * 31 + round);
    const uint8_t expect = static_cast<uint8_t>(prev * 31 + round);
    CUDA_OK(cudaMemsetAsync(dst.get(), 0, n, compute_));
    RequestPtr rq = comm_->recv(dst.get(), n, DType::U8, prev, round);
    EXPECT_EQ(dev_->last_route(), Route::STAGED_MPI);
    CUDA_OK(cudaMemsetAsync(src.get(), v, n, compute_));
    RequestPtr sq = comm_->send(src.get(), n, DType::U8, next, round);
    EXPECT_EQ(dev_->last_route(), Route::STAGED_MPI);
    // The device buffer is free once send() returns: overwriting it changes nothing sent.
    CUDA_OK(cudaMemsetAsync(src.get(), 0xEE, n, compute_));
    rq->wait();
    EXPECT_TRUE(rq->test());
    sq->wait();
    ASSERT_TRUE(all_equal(read_back(dst.get(), n), expect)) << "round " << round;
    if (round == 0) allocations_after_warmup = dev_->staging_allocations();
  }
  EXPECT_EQ(dev_->staging_allocations(), allocations_after_warmup);
  EXPECT_LE(allocations_after_warmup, 2u);  // one for the receive, one for the send
  EXPECT_EQ(dev_->staging_buffers_free(), allocations_after_warmup);

  // Smaller messages reuse the pooled buffers when they fit (at most 2x larger); zero-element
  // messages go unstaged through MPI.
  const size_t before = dev_->staging_allocations();
  RequestPtr rq = comm_->recv(dst.get(), n - 1000, DType::U8, prev, 1000);
  RequestPtr sq = comm_->send(src.get(), n - 1000, DType::U8, next, 1000);
  rq->wait();
  sq->wait();
  EXPECT_EQ(dev_->staging_allocations(), before);
  RequestPtr rz = comm_->recv(dst.get(), 0, DType::U8, prev, 1001);
  RequestPtr sz = comm_->send(src.get(), 0, DType::U8, next, 1001);
  EXPECT_EQ(dev_->last_route(), Route::HOST_MPI);
  rz->wait();
  sz->wait();
  comm_->synchronize();
}

// Several receives posted early and waited in order, as the pipeline executor does with its
// microbatches; typed (BF16 / F32) payloads with per-element values.
TEST_F(DeviceCommTest, EarlyPostedReceives) {
  const int r = comm_->rank(), p = comm_->size();
  const int next = (r + 1) % p, prev = (r + p - 1) % p;
  const int k = 4;
  const size_t n = 100000;
  std::vector<std::unique_ptr<DeviceBytes>> in, out;
  std::vector<RequestPtr> recvs, sends;
  for (int m = 0; m < k; ++m) {
    in.push_back(std::make_unique<DeviceBytes>(n * sizeof(float)));
    out.push_back(std::make_unique<DeviceBytes>(n * sizeof(float)));
    recvs.push_back(comm_->recv(in[m]->get(), n, DType::F32, prev, 7 + m));
  }
  for (int m = 0; m < k; ++m) {
    std::vector<float> h(n);
    for (size_t i = 0; i < n; ++i) h[i] = static_cast<float>(r * 1000 + m * 10) + i * 0.5f;
    CUDA_OK(cudaMemcpy(out[m]->get(), h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    sends.push_back(comm_->send(out[m]->get(), n, DType::F32, next, 7 + m));
  }
  for (int m = 0; m < k; ++m) {
    recvs[m]->wait();
    std::vector<uint8_t> raw = read_back(in[m]->get(), n * sizeof(float));
    const float* got = reinterpret_cast<const float*>(raw.data());
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(got[i], static_cast<float>(prev * 1000 + m * 10) + i * 0.5f) << "m " << m << " i " << i;
  }
  for (auto& s : sends) s->wait();
}

TEST_F(DeviceCommTest, SplitKeepsRouting) {
  const int r = comm_->rank(), p = comm_->size();
  auto sub = comm_->split(r % 2, r);
  auto* typed = dynamic_cast<DeviceComm*>(sub.get());
  ASSERT_NE(typed, nullptr);
  EXPECT_EQ(sub->backend(), "nccl+mpi");
  EXPECT_EQ(sub->size(), (p - r % 2 + 1) / 2);
  EXPECT_EQ(sub->rank(), r / 2);
  EXPECT_EQ(typed->compute_stream(), static_cast<void*>(compute_));
  double sum = 0;
  for (int q = r % 2; q < p; q += 2) sum += q;
  EXPECT_EQ(sub->all_reduce_scalar(r), sum);
  EXPECT_EQ(typed->last_route(), Route::HOST_MPI);
  DeviceBytes d(1 << 16);
  CUDA_OK(cudaMemsetAsync(d.get(), 1, d.bytes(), compute_));
  sub->all_reduce(d.get(), d.bytes(), DType::U8, ReduceOp::SUM);
  EXPECT_EQ(typed->last_route(), Route::NCCL);
  EXPECT_TRUE(all_equal(read_back(d.get(), d.bytes()), static_cast<uint8_t>(sub->size())));
  sub->barrier();
}

}  // namespace
}  // namespace baton::dist
