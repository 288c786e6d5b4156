// MpiComm against straightforward references, under mpirun with 1..4 ranks: every collective for
// every dtype, op and several sizes (0, 1, 7, 1000, 2^16), blocking and asynchronous; send/recv
// ring with tags; split; scalar reductions; the failure guard in a one-rank job.
// Inputs are rank-dependent integers (typed_buffer.h), so every expected value is exact.
#include <gtest/gtest.h>

#include <chrono>
#include <climits>
#include <string>
#include <thread>

#include "core/error.h"
#include "core/timer.h"
#include "dist/guard.h"
#include "dist/mpi_comm.h"
#include "dist/node_local.h"
#include "typed_buffer.h"

namespace baton::dist {
namespace {

using testing::input_value;
using testing::kAllDTypes;
using testing::kAllOps;
using testing::reduced_value;
using testing::kSizes;
using testing::matches;
using testing::TypedBuffer;

std::string ctx(DType t, size_t n, const char* what = "") {
  return std::string(testing::dtype_name(t)) + " " + what + " n=" + std::to_string(n);
}

TEST(CommMpi, Basics) {
  auto world = MpiRuntime::world();
  EXPECT_EQ(world->backend(), "mpi");
  EXPECT_GE(world->size(), 1);
  EXPECT_GE(world->rank(), 0);
  EXPECT_LT(world->rank(), world->size());
  EXPECT_TRUE(MpiRuntime::initialized());
  EXPECT_EQ(dtype_size(DType::F32), 4u);
  EXPECT_EQ(dtype_size(DType::F64), 8u);
  EXPECT_EQ(dtype_size(DType::I32), 4u);
  EXPECT_EQ(dtype_size(DType::I64), 8u);
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
  EXPECT_EQ(dtype_size(DType::U8), 1u);
  world->barrier();
}

// The collectives and point-to-point calls under both wait policies (dist/comm.h): SLEEP completes
// nonblocking twins of the blocking calls by MPI_Test and sleeps, with the same results.
class CommMpiWaits : public ::testing::TestWithParam<WaitPolicy> {
 protected:
  void SetUp() override { set_wait_policy(GetParam()); }
  void TearDown() override { set_wait_policy(WaitPolicy::SPIN); }
};
INSTANTIATE_TEST_SUITE_P(Policies, CommMpiWaits, ::testing::Values(WaitPolicy::SPIN, WaitPolicy::SLEEP),
                         [](const auto& info) { return info.param == WaitPolicy::SPIN ? "spin" : "sleep"; });

TEST_P(CommMpiWaits, AllReduce) {
  auto world = MpiRuntime::world();
  const int r = world->rank(), p = world->size();
  for (DType t : kAllDTypes)
    for (ReduceOp op : kAllOps)
      for (size_t n : kSizes)
        for (bool async : {false, true}) {
          TypedBuffer buf(t, n);
          buf.fill([&](size_t i) { return input_value(t, r, i); });
          if (async) {
            RequestPtr req = world->all_reduce_async(buf.data(), n, t, op);
            req->wait();
            EXPECT_TRUE(req->test());  // complete after wait
          } else {
            world->all_reduce(buf.data(), n, t, op);
          }
          EXPECT_TRUE(matches(buf, [&](size_t i) { return reduced_value(t, op, p, i); }))
              << ctx(t, n, testing::op_name(op)) << (async ? " async" : "");
        }
}

TEST_P(CommMpiWaits, ReduceScatter) {
  auto world = MpiRuntime::world();
  const int r = world->rank(), p = world->size();
  for (DType t : kAllDTypes)
    for (ReduceOp op : kAllOps)
      for (size_t n : kSizes)
        for (bool async : {false, true}) {
          TypedBuffer send(t, n * p), recv(t, n);
          send.fill([&](size_t i) { return input_value(t, r, i); });
          if (async) {
            world->reduce_scatter_async(send.data(), recv.data(), n, t, op)->wait();
          } else {
            world->reduce_scatter(send.data(), recv.data(), n, t, op);
          }
          // Rank r holds block r of the reduction.
          EXPECT_TRUE(matches(recv, [&](size_t i) { return reduced_value(t, op, p, r * n + i); }))
              << ctx(t, n, testing::op_name(op)) << (async ? " async" : "");
        }
}

TEST_P(CommMpiWaits, AllGather) {
  auto world = MpiRuntime::world();
  const int r = world->rank(), p = world->size();
  for (DType t : kAllDTypes)
    for (size_t n : kSizes)
      for (bool in_place : {false, true}) {
        TypedBuffer recv(t, n * p);
        // Block b of the result comes from rank b; element i of it is rank b's input i.
        auto expected = [&](size_t j) { return input_value(t, static_cast<int>(j / n), j % n); };
        if (in_place) {
          for (size_t i = 0; i < n; ++i) recv.set(r * n + i, input_value(t, r, i));
          world->all_gather(recv.at(r * n), recv.data(), n, t);
        } else {
          TypedBuffer send(t, n);
          send.fill([&](size_t i) { return input_value(t, r, i); });
          world->all_gather(send.data(), recv.data(), n, t);
        }
        EXPECT_TRUE(matches(recv, expected)) << ctx(t, n) << (in_place ? " in place" : "");
      }
}

TEST_P(CommMpiWaits, Broadcast) {
  auto world = MpiRuntime::world();
  const int r = world->rank(), p = world->size();
  for (DType t : kAllDTypes)
    for (size_t n : kSizes)
      for (int root = 0; root < p; ++root) {
        TypedBuffer buf(t, n);
        buf.fill([&](size_t i) { return r == root ? input_value(t, root, i) : 0.0; });
        world->broadcast(buf.data(), n, t, root);
        EXPECT_TRUE(matches(buf, [&](size_t i) { return input_value(t, root, i); }))
            << ctx(t, n) << " root " << root;
      }
}

// Each rank sends to the next and receives from the previous (itself in a one-rank job), several
// messages per step with distinct tags posted in opposite orders: MPI must match them by tag.
TEST_P(CommMpiWaits, SendRecvRing) {
  auto world = MpiRuntime::world();
  const int r = world->rank(), p = world->size();
  const int next = (r + 1) % p, prev = (r + p - 1) % p;
  for (DType t : kAllDTypes)
    for (size_t n : kSizes) {
      const int kTags = 3;
      std::vector<TypedBuffer> out, in;
      for (int k = 0; k < kTags; ++k) {
        out.emplace_back(t, n);
        in.emplace_back(t, n);
        out.back().fill([&](size_t i) { return input_value(t, r, i + k); });
      }
      std::vector<RequestPtr> reqs;
      world->group_begin();  // a no-op for MPI; exercised so callers can write backend-neutral code
      for (int k = kTags - 1; k >= 0; --k) reqs.push_back(world->recv(in[k].data(), n, t, prev, k));
      for (int k = 0; k < kTags; ++k) reqs.push_back(world->send(out[k].data(), n, t, next, k));
      world->group_end();
      for (auto& q : reqs) q->wait();
      for (int k = 0; k < kTags; ++k)
        EXPECT_TRUE(matches(in[k], [&](size_t i) { return input_value(t, prev, i + k); }))
            << ctx(t, n) << " tag " << k;
    }
}

TEST_P(CommMpiWaits, Barrier) {
  auto world = MpiRuntime::world();
  for (int i = 0; i < 5; ++i) world->barrier();
}

// A rank waiting under SLEEP leaves its core: rank 0 sends (and enters the barrier) 0.3 s late; the
// others' receive and barrier waits take the wall time but almost no CPU time of their thread
// (MPI_Wait polls: close to all of it).
TEST(CommMpi, SleepingWaitsLeaveTheCore) {
  auto world = MpiRuntime::world();
  const int r = world->rank(), p = world->size();
  if (p < 2) GTEST_SKIP() << "needs 2 ranks";
  set_wait_policy(WaitPolicy::SLEEP);
  double value = r == 0 ? 42 : 0;
  WorkTimer t;
  if (r == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    for (int peer = 1; peer < p; ++peer) world->send(&value, 1, DType::F64, peer, 7)->wait();
  } else {
    world->recv(&value, 1, DType::F64, 0, 7)->wait();
  }
  if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  world->barrier();
  const WorkTime w = t.elapsed();
  set_wait_policy(WaitPolicy::SPIN);
  EXPECT_EQ(value, 42);
  if (r != 0) {
    EXPECT_GE(w.wall, 0.55);
    EXPECT_LT(w.cpu, 0.1 * w.wall) << "rank " << r << " waited " << w.wall << " s using " << w.cpu << " s of CPU";
  }
}

TEST(CommMpi, RequestTestPollsToCompletion) {
  auto world = MpiRuntime::world();
  const int r = world->rank(), p = world->size();
  TypedBuffer buf(DType::F64, 1000);
  buf.fill([&](size_t i) { return input_value(DType::F64, r, i); });
  RequestPtr req = world->all_reduce_async(buf.data(), buf.size(), DType::F64, ReduceOp::SUM);
  while (!req->test()) {
  }
  req->wait();  // returns at once after test() said complete
  EXPECT_TRUE(matches(buf, [&](size_t i) { return reduced_value(DType::F64, ReduceOp::SUM, p, i); }));
}

TEST(CommMpi, RecvOfWrongLengthIsAnError) {
  auto world = MpiRuntime::world();
  const int r = world->rank(), p = world->size();
  std::vector<float> out(3, 1.0f), in(5, 0.0f);
  RequestPtr rq = world->recv(in.data(), in.size(), DType::F32, (r + p - 1) % p, 7);
  RequestPtr sq = world->send(out.data(), out.size(), DType::F32, (r + 1) % p, 7);
  sq->wait();
  EXPECT_THROW(rq->wait(), Error);
}

TEST(CommMpi, Split) {
  auto world = MpiRuntime::world();
  const int r = world->rank(), p = world->size();
  // Two groups by parity, ordered by descending world rank (key = -rank).
  auto sub = world->split(r % 2, -r);
  std::vector<int> members;
  for (int q = p - 1; q >= 0; --q)
    if (q % 2 == r % 2) members.push_back(q);
  ASSERT_EQ(sub->size(), static_cast<int>(members.size()));
  EXPECT_EQ(members[sub->rank()], r);
  EXPECT_EQ(sub->backend(), "mpi");
  std::vector<int32_t> gathered(members.size());
  int32_t mine = r;
  sub->all_gather(&mine, gathered.data(), 1, DType::I32);
  EXPECT_EQ(std::vector<int>(gathered.begin(), gathered.end()), members);
  // Groups are independent: a collective on one does not involve the other.
  double sum = 0;
  for (int q : members) sum += q;
  EXPECT_EQ(sub->all_reduce_scalar(r), sum);
  // A split of a split still works, and equal keys keep the parent's order.
  auto same = sub->split(0, 0);
  EXPECT_EQ(same->rank(), sub->rank());
  EXPECT_EQ(same->size(), sub->size());
  world->barrier();
}

TEST(CommMpi, ScalarReductions) {
  auto world = MpiRuntime::world();
  const int r = world->rank(), p = world->size();
  EXPECT_EQ(world->all_reduce_scalar(r + 0.5), p * (p - 1) / 2.0 + 0.5 * p);
  EXPECT_EQ(world->all_reduce_scalar(r, ReduceOp::MAX), p - 1);
  EXPECT_EQ(world->all_reduce_scalar(r, ReduceOp::MIN), 0);
}

TEST(CommMpi, OversizedCountIsAClearError) {
  auto world = MpiRuntime::world();
  // Rejected before any MPI call, identically on every rank, so nothing is left pending.
  const size_t too_many = static_cast<size_t>(INT_MAX) + 1;
  EXPECT_THROW(world->all_reduce(nullptr, too_many, DType::U8, ReduceOp::SUM), Error);
  world->barrier();
}

TEST(CommMpi, NodeLocalOnOneMachine) {
  auto world = MpiRuntime::world();
  const NodeLocal local = node_local();  // ctest runs every rank on this machine
  EXPECT_EQ(local.local_rank, world->rank());
  EXPECT_EQ(local.local_size, world->size());
}

TEST(CommMpi, GuardReturnsBodyResult) {
  EXPECT_EQ(run_guarded([] { return 7; }), 7);
  if (MpiRuntime::world()->size() > 1) GTEST_SKIP() << "a failing body aborts multi-rank jobs";
  ::testing::internal::CaptureStderr();
  const int rc = run_guarded([]() -> int { throw Error("bad input", "fix the input"); });
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, 1);
  EXPECT_EQ(err, "error: bad input\nhint: fix the input\n");
}

}  // namespace
}  // namespace baton::dist
