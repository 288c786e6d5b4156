// NcclComm on a real GPU: the collectives' semantics with device buffers (all_reduce,
// reduce_scatter, all_gather incl. in place, broadcast), async requests, self send/recv inside a
// group, split, barrier and host scalars. Written for any number of ranks (one GPU each, device =
// rank % devices); ctest runs it as a one-rank job. Without a CUDA device every test prints
// "skipped: no CUDA device" and is skipped.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>

#include "../support/gpu_test.h"
#include "../dist/typed_buffer.h"
#include "dist/nccl_comm.h"

namespace baton::dist {
namespace {

using testing::input_value;
using testing::kAllDTypes;
using testing::kAllOps;
using testing::reduced_value;
using testing::kSizes;
using testing::matches;
using testing::TypedBuffer;

int cuda_devices() {
  int n = 0;
  // No driver or no device both read as zero devices.
  if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
  return n;
}

// A device copy of a TypedBuffer.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes_ && cudaMalloc(&ptr_, bytes_) != cudaSuccess) throw std::bad_alloc();
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() { return ptr_; }
  char* at(size_t offset) { return static_cast<char*>(ptr_) + offset; }
  void upload(const TypedBuffer& h) {
    ASSERT_EQ(h.bytes(), bytes_);
    if (bytes_) {
      ASSERT_EQ(cudaMemcpy(ptr_, h.data(), bytes_, cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  void download(TypedBuffer& h) {
    ASSERT_EQ(h.bytes(), bytes_);
    if (bytes_) {
      ASSERT_EQ(cudaMemcpy(h.data(), ptr_, bytes_, cudaMemcpyDeviceToHost), cudaSuccess);
    }
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
};

class NcclCommTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (cuda_devices() == 0) {
      std::printf("skipped: no CUDA device\n");
      return;
    }
    world_ = MpiRuntime::world().release();
    nccl_ = make_nccl_comm(*world_, world_->rank() % cuda_devices()).release();
  }
  static void TearDownTestSuite() {
    delete nccl_;  // before MPI_Finalize (main)
    delete world_;
    nccl_ = nullptr;
    world_ = nullptr;
  }
  void SetUp() override {
    BATON_GPU_TEST_OR_SKIP();
    ASSERT_NE(nccl_, nullptr) << "a CUDA device is present but the communicator was not made (make_nccl_comm failed)";
  }
  static Comm* world_;
  static Comm* nccl_;
};
Comm* NcclCommTest::world_ = nullptr;
Comm* NcclCommTest::nccl_ = nullptr;

TEST_F(NcclCommTest, Basics) {
  EXPECT_EQ(nccl_->backend(), "nccl");
  EXPECT_EQ(nccl_->rank(), world_->rank());
  EXPECT_EQ(nccl_->size(), world_->size());
  auto* typed = dynamic_cast<NcclComm*>(nccl_);
  ASSERT_NE(typed, nullptr);
  EXPECT_NE(typed->stream(), nullptr);
  nccl_->barrier();
}

TEST_F(NcclCommTest, AllReduce) {
  const int r = nccl_->rank(), p = nccl_->size();
  for (DType t : kAllDTypes)
    for (ReduceOp op : kAllOps)
      for (size_t n : kSizes)
        for (bool async : {false, true}) {
          TypedBuffer h(t, n);
          h.fill([&](size_t i) { return input_value(t, r, i); });
          DeviceBuffer d(h.bytes());
          d.upload(h);
          if (async) {
            RequestPtr q = nccl_->all_reduce_async(d.get(), n, t, op);
            q->wait();
            EXPECT_TRUE(q->test());
          } else {
            nccl_->all_reduce(d.get(), n, t, op);
            nccl_->synchronize();
          }
          h.fill([](size_t) { return 0.0; });
          d.download(h);
          EXPECT_TRUE(matches(h, [&](size_t i) { return reduced_value(t, op, p, i); }))
              << testing::dtype_name(t) << " " << testing::op_name(op) << " n=" << n;
        }
}

TEST_F(NcclCommTest, ReduceScatter) {
  const int r = nccl_->rank(), p = nccl_->size();
  for (DType t : kAllDTypes)
    for (size_t n : kSizes) {
      TypedBuffer hs(t, n * p), hr(t, n);
      hs.fill([&](size_t i) { return input_value(t, r, i); });
      DeviceBuffer ds(hs.bytes()), dr(hr.bytes());
      ds.upload(hs);
      nccl_->reduce_scatter_async(ds.get(), dr.get(), n, t, ReduceOp::SUM)->wait();
      dr.download(hr);
      EXPECT_TRUE(matches(hr, [&](size_t i) { return reduced_value(t, ReduceOp::SUM, p, r * n + i); }))
          << testing::dtype_name(t) << " n=" << n;
    }
}

TEST_F(NcclCommTest, AllGather) {
  const int r = nccl_->rank(), p = nccl_->size();
  for (DType t : kAllDTypes)
    for (size_t n : kSizes)
      for (bool in_place : {false, true}) {
        const size_t block = n * dtype_size(t);
        TypedBuffer hs(t, n), hr(t, n * p);
        hs.fill([&](size_t i) { return input_value(t, r, i); });
        DeviceBuffer ds(hs.bytes()), dr(hr.bytes());
        if (in_place) {
          if (block) {
            ASSERT_EQ(cudaMemcpy(dr.at(r * block), hs.data(), block, cudaMemcpyHostToDevice),
                      cudaSuccess);
          }
          nccl_->all_gather(dr.at(r * block), dr.get(), n, t);
        } else {
          ds.upload(hs);
          nccl_->all_gather(ds.get(), dr.get(), n, t);
        }
        dr.download(hr);  // the legacy default stream waits for the comm's blocking stream
        EXPECT_TRUE(matches(hr, [&](size_t j) { return input_value(t, static_cast<int>(j / n), j % n); }))
            << testing::dtype_name(t) << " n=" << n << (in_place ? " in place" : "");
      }
}

TEST_F(NcclCommTest, Broadcast) {
  const int r = nccl_->rank(), p = nccl_->size();
  for (int root = 0; root < p; ++root) {
    const DType t = DType::F32;
    TypedBuffer h(t, 1000);
    h.fill([&](size_t i) { return r == root ? input_value(t, root, i) : 0.0; });
    DeviceBuffer d(h.bytes());
    d.upload(h);
    nccl_->broadcast(d.get(), h.size(), t, root);
    nccl_->synchronize();
    d.download(h);
    EXPECT_TRUE(matches(h, [&](size_t i) { return input_value(t, root, i); })) << "root " << root;
  }
}

// Ring exchange (a self send/recv in a one-rank job), which NCCL allows only inside a group.
TEST_F(NcclCommTest, SendRecvInGroup) {
  const int r = nccl_->rank(), p = nccl_->size();
  const int next = (r + 1) % p, prev = (r + p - 1) % p;
  const DType t = DType::BF16;
  TypedBuffer hs(t, 4096), hr(t, 4096);
  hs.fill([&](size_t i) { return input_value(t, r, i); });
  DeviceBuffer ds(hs.bytes()), dr(hr.bytes());
  ds.upload(hs);
  nccl_->group_begin();
  RequestPtr rq = nccl_->recv(dr.get(), hr.size(), t, prev, 0);
  RequestPtr sq = nccl_->send(ds.get(), hs.size(), t, next, 0);
  EXPECT_FALSE(rq->test());  // not launched before group_end
  nccl_->group_end();
  sq->wait();
  rq->wait();
  dr.download(hr);
  EXPECT_TRUE(matches(hr, [&](size_t i) { return input_value(t, prev, i); }));
}

TEST_F(NcclCommTest, SplitAndScalars) {
  const int r = nccl_->rank(), p = nccl_->size();
  EXPECT_EQ(nccl_->all_reduce_scalar(r), p * (p - 1) / 2.0);
  EXPECT_EQ(nccl_->all_reduce_scalar(r, ReduceOp::MAX), p - 1);
  auto sub = nccl_->split(r % 2, r);
  EXPECT_EQ(sub->backend(), "nccl");
  EXPECT_EQ(sub->size(), (p - r % 2 + 1) / 2);
  EXPECT_EQ(sub->rank(), r / 2);
  double sum = 0;
  for (int q = r % 2; q < p; q += 2) sum += q;
  EXPECT_EQ(sub->all_reduce_scalar(r), sum);
  sub->barrier();
}

}  // namespace
}  // namespace baton::dist
