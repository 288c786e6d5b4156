// The WSP parameter server's data path (dist/param_server.h) under mpirun, every rank one VW and one
// shard: pushes add exactly, a pull returns exactly w0 + every VW's waves before its c_global (a
// wave pushed by some VWs only is not in it) and only once the clock rule allows, concurrent pushes
// from every VW are not lost, and a waiting pull wakes up when the last VW pushes. Values are small
// integers, so every float sum is exact in any order.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "dist/mpi_comm.h"
#include "dist/param_server.h"
#include "param_server_values.h"

namespace baton::dist {
namespace {

using namespace values;

TEST(ParamServer, ShardsRoundRobin) {
  auto world = MpiRuntime::world();
  ParamServer ps(MPI_COMM_WORLD, spans(), world->size(), 0);
  EXPECT_EQ(ps.shards(), world->size());
  for (int i = 0; i < 6; ++i) EXPECT_EQ(ps.shard_of(i), i % world->size());
}

TEST(ParamServer, PushesAddExactly) {
  auto world = MpiRuntime::world();
  const int n = world->size(), me = world->rank();
  ParamServer ps(MPI_COMM_WORLD, spans(), n, 2);
  ps.init(initial().data());
  std::vector<float> out(kFlat, -7.0f);
  auto c = ps.try_pull(0, out.data());
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(*c, 0);
  expect_snapshot(out, *c, n, -7.0f);

  for (int k = 0; k < 3; ++k) ps.push(me, k, wave(me, k).data());  // D = 2: three waves ahead is allowed
  world->barrier();
  c = ps.try_pull(3, out.data());
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(*c, 3);
  expect_snapshot(out, *c, n, -7.0f);
  world->barrier();  // nobody frees the window while a peer still reads
}

TEST(ParamServer, PullWaitsForTheClockRule) {
  auto world = MpiRuntime::world();
  const int n = world->size(), me = world->rank();
  ParamServer ps(MPI_COMM_WORLD, spans(), n, 0);
  ps.init(initial().data());
  std::vector<float> out(kFlat, 0.0f);
  // Only VW 0 has pushed wave 0: c_global = 0 (1 with a single VW).
  if (me == 0) ps.push(0, 0, wave(0, 0).data());
  world->barrier();
  const auto early = ps.try_pull(1, out.data());
  EXPECT_EQ(early.has_value(), n == 1);
  if (n > 1) {  // a pull of an earlier clock returns w_global as of c_global = 0: w0, not VW 0's wave
    const auto c0 = ps.try_pull(0, out.data());
    ASSERT_TRUE(c0.has_value());
    EXPECT_EQ(*c0, 0);
    expect_snapshot(out, 0, n, 0.0f);
  }
  world->barrier();
  // The last VWs push after a delay; a waiting pull on rank 0 returns once they have.
  if (me != 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ps.push(me, 0, wave(me, 0).data());
  }
  double waited = 0;
  const int64_t got = ps.pull(1, out.data(), &waited);
  EXPECT_EQ(got, 1);
  expect_snapshot(out, got, n, 0.0f);
  if (me == 0 && n > 1) {
    EXPECT_GT(waited, 0.05);
  }
  world->barrier();
}

// Every VW runs waves back to back with D = 1 (pull at the end of clock k ≥ 1 needs c_global ≥ k),
// no barriers: each pull's data is exactly the waves before its c_global, and the final w_global
// holds every push once (the two wave slots are reused 20 times each).
TEST(ParamServer, ConcurrentPushesAreNotLost) {
  auto world = MpiRuntime::world();
  const int n = world->size(), me = world->rank();
  constexpr int kWaves = 40, kD = 1;
  ParamServer ps(MPI_COMM_WORLD, spans(), n, kD);
  ps.init(initial().data());
  std::vector<float> out(kFlat, 0.0f);
  for (int k = 0; k < kWaves; ++k) {
    ps.push(me, k, wave(me, k).data());
    if (k < kD) continue;
    const int64_t c = ps.pull(k - kD + 1, out.data());
    ASSERT_GE(c, k - kD + 1);
    ASSERT_LE(c, k + 1) << "c_global cannot pass this VW's own pushes";
    expect_snapshot(out, c, n, 0.0f);
  }
  world->barrier();
  const auto c = ps.try_pull(kWaves, out.data());
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(*c, kWaves);
  expect_snapshot(out, *c, n, 0.0f);
  world->barrier();
}

// A VW's wave pushed in two parts (the stages of a pipelined VW, each pushing its own tensors, with
// tensors placed by the caller): c_global does not advance until every VW's every part arrived,
// and a pull of one part reads only its tensors.
TEST(ParamServer, WavesInPartsAndPlacedTensors) {
  auto world = MpiRuntime::world();
  const int n = world->size(), me = world->rank();
  const std::vector<int> placement = {n - 1, n - 1, 0, n - 1, 0, 0};  // not round robin
  ParamServer ps(MPI_COMM_WORLD, spans(), n, 1, placement);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(ps.shard_of(i), placement[static_cast<size_t>(i)]);
  ps.init(initial().data());
  const ParamServer::Selection first = ps.select({0, 2, 4}), second = ps.select({5, 3, 1});
  std::vector<float> out(kFlat, -3.0f);
  for (int k = 0; k < 2; ++k) {
    ps.push(me, k, wave(me, k).data(), first);
    world->barrier();
    EXPECT_FALSE(ps.try_pull(k + 1, out.data()).has_value()) << "wave " << k << " is only partly pushed";
    world->barrier();
    ps.push(me, k, wave(me, k).data(), second);
    world->barrier();
    const auto c = ps.try_pull(k + 1, out.data());
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(*c, k + 1);
    expect_snapshot(out, *c, n, -3.0f);
    world->barrier();
  }
  // A pull of one part writes only its tensors.
  std::vector<float> part(kFlat, -5.0f);
  ASSERT_TRUE(ps.try_pull(2, part.data(), second).has_value());
  for (int i : {0, 2, 4}) {
    const TensorSpan t = spans()[static_cast<size_t>(i)];
    EXPECT_EQ(part[t.offset], -5.0f) << "tensor " << i << " is not in the selection";
  }
  for (int i : {1, 3, 5}) {
    const TensorSpan t = spans()[static_cast<size_t>(i)];
    EXPECT_EQ(part[t.offset], out[t.offset]) << "tensor " << i;
  }
  world->barrier();
}

}  // namespace
}  // namespace baton::dist
