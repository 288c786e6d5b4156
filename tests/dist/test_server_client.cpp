// The parameter server's client (dist/server_client.h) under mpirun, every rank one VW, with its
// thread (MPI_THREAD_MULTIPLE, asked for by tests/CMakeLists.txt) and without: pushes handed over
// arrive in order and are not lost, a pull returns exactly w0 + every VW's waves before its
// c_global, take_pull never blocks, wait_pull returns once the last VW pushes, and a cancelled pull's
// result is never returned. Values are small integers, so every float sum is exact in any order.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "core/timer.h"
#include "dist/mpi_comm.h"
#include "dist/server_client.h"
#include "param_server_values.h"

namespace baton::dist {
namespace {

using namespace values;

class ServerClientTest : public testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (GetParam()) {
      ASSERT_TRUE(MpiRuntime::thread_multiple()) << "the client's thread needs MPI_THREAD_MULTIPLE";
    }
  }
};

// WSP's pattern with D = 1: push wave k, then the pull of clock k (needs c_global ≥ k), 30 waves,
// no barriers; at the end every wave of every VW is in w_global once.
TEST_P(ServerClientTest, WavesArriveInOrderAndPullsAreExact) {
  auto world = MpiRuntime::world();
  const int n = world->size(), me = world->rank();
  constexpr int kWaves = 30, kD = 1;
  ParamServer ps(MPI_COMM_WORLD, spans(), n, kD);
  ps.init(initial().data());
  std::vector<float> out(kFlat, 0.0f);
  {
    ServerClient client(ps, ps.all(), ps.all(), me, kFlat, GetParam());
    EXPECT_EQ(client.background(), GetParam());
    for (int k = 0; k < kWaves; ++k) {
      client.push(k, wave(me, k));
      if (k < kD) continue;
      client.request_pull(k - kD + 1);
      const int64_t c = client.wait_pull(out);
      ASSERT_GE(c, k - kD + 1);
      ASSERT_LE(c, k + 1) << "c_global cannot pass this VW's own pushes";
      expect_snapshot(out, c, n);
    }
    client.drain();
    world->barrier();
    client.request_pull(kWaves);
    const int64_t c = client.wait_pull(out);
    EXPECT_EQ(c, kWaves);
    expect_snapshot(out, c, n);
  }
  world->barrier();
}

// A pull the server does not allow yet: take_pull returns at once with nothing; wait_pull returns
// when the last VWs push (after 200 ms), counting the time blocked.
TEST_P(ServerClientTest, TakeNeverBlocksAndWaitReturnsOnTheLastPush) {
  auto world = MpiRuntime::world();
  const int n = world->size(), me = world->rank();
  ParamServer ps(MPI_COMM_WORLD, spans(), n, 0);
  ps.init(initial().data());
  std::vector<float> out(kFlat, 0.0f);
  {
    ServerClient client(ps, ps.all(), ps.all(), me, kFlat, GetParam());
    if (me == 0) {
      client.push(0, wave(0, 0));
      client.request_pull(1);
      if (n > 1) {
        Timer t;
        for (int i = 0; i < 20; ++i) EXPECT_FALSE(client.take_pull(out).has_value());
        EXPECT_LT(t.seconds(), 0.15) << "take_pull must not wait for the server";
      }
    }
    world->barrier();
    if (me != 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      client.push(0, wave(me, 0));
      client.request_pull(1);
    }
    double blocked = 0;
    const int64_t c = client.wait_pull(out, &blocked);
    EXPECT_EQ(c, 1);
    expect_snapshot(out, c, n);
    if (me == 0 && n > 1) {
      EXPECT_GT(blocked, 0.1);
    }
  }
  world->barrier();
}

// A pull that returned and was cancelled is not handed out: the fresh request gets the fresh state.
TEST_P(ServerClientTest, CancelledPullIsNeverReturned) {
  auto world = MpiRuntime::world();
  const int n = world->size(), me = world->rank();
  ParamServer ps(MPI_COMM_WORLD, spans(), n, 2);
  ps.init(initial().data());
  std::vector<float> out(kFlat, 0.0f);
  {
    ServerClient client(ps, ps.all(), ps.all(), me, kFlat, GetParam());
    client.request_pull(0);  // allowed at once: returns w0 (on the thread, soon)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    client.cancel_pull();
    EXPECT_FALSE(client.pull_requested());
    EXPECT_FALSE(client.take_pull(out).has_value());
    for (int k = 0; k < 3; ++k) client.push(k, wave(me, k));
    client.drain();
    world->barrier();
    client.request_pull(3);
    const int64_t c = client.wait_pull(out);
    EXPECT_EQ(c, 3);
    expect_snapshot(out, c, n);
  }
  world->barrier();
}

INSTANTIATE_TEST_SUITE_P(ThreadOrNot, ServerClientTest, testing::Bool(),
                         [](const testing::TestParamInfo<bool>& p) { return p.param ? "Thread" : "Inline"; });

}  // namespace
}  // namespace baton::dist
