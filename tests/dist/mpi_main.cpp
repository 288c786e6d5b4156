// Shared main for the MPI test binaries (tests/dist, tests/gpu): gtest inside an MPI job.
// - Every rank runs every test; rank 0 prints gtest's usual report, other ranks print only their
//   own failures, prefixed with the rank.
// - A test that fails on any rank aborts the whole job right after it is reported: an ASSERT that
//   returns early leaves the other ranks blocked in a collective this rank skipped, and a hang
//   would only surface as a ctest timeout with no message.
// - Without mpirun this is a one-rank job (MPI singleton).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "dist/comm.h"

namespace {

using baton::dist::MpiRuntime;

class RankFailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 r.file_name() ? r.file_name() : "?", r.line_number(), r.message());
  }

 private:
  int rank_;
};

class AbortOnFailure : public testing::EmptyTestEventListener {
 public:
  explicit AbortOnFailure(int rank) : rank_(rank) {}
  void OnTestEnd(const testing::TestInfo& info) override {
    if (!info.result()->Failed()) return;
    std::fprintf(stderr, "[rank %d] %s.%s failed: aborting every rank\n", rank_,
                 info.test_suite_name(), info.name());
    MpiRuntime::abort(1);
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  // A test program of threads that call MPI (test_server_client) asks for MPI_THREAD_MULTIPLE
  // through the environment (tests/CMakeLists.txt).
  const char* multiple = std::getenv("BATON_TEST_MPI_THREAD_MULTIPLE");
  MpiRuntime::init(&argc, &argv, multiple && std::string(multiple) == "1");
  testing::InitGoogleTest(&argc, argv);
  const int rank = MpiRuntime::world()->rank();
  auto& listeners = testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  listeners.Append(new AbortOnFailure(rank));
  const int rc = RUN_ALL_TESTS();
  MpiRuntime::finalize();
  return rc;
}
