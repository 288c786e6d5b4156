// Layout invariance (issue 4): the tiny GPT trained for 12 steps under every (tp, dp) layout that
// fits the world size — with and without sequence parallelism and ZeRO-1 — must give the
// single-process losses and grad norms within 1e-4 relative. Run under mpirun; rank 0 computes the
// single-process reference itself (no communicator) before the parallel runs.
//   mpirun -np N layout_invariance        (N = 2 or 4; exit code 0 = all layouts match)
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "dist/comm.h"
#include "dist/guard.h"
#include "test_session.h"

using namespace baton;

namespace {

constexpr int kSteps = 12, kGlobalBatch = 8, kMicro = 2, kSeq = 8, kVocab = 37;

// The same global batch for every layout (tiny_gpt.h).
void batch_rows(int64_t step, int row, int rows, int32_t* x, int32_t* y) {
  test::synthetic_rows(99, kSeq, kVocab, step, row, rows, x, y);
}

struct Trace {
  std::vector<double> loss, norm;
};

// The trainer's session (pp = 1: a one-stage program through the executor) for tp × dp.
Trace run(int tp, int dp, bool sp, bool zero1, dist::Comm* world) {
  const test::TestRun r{.dims = test::tiny_gpt_dims(2, kSeq, kVocab), .global_batch = kGlobalBatch,
                        .micro_batch = kMicro, .steps = kSteps};
  auto session = test::test_session({.tp = tp, .dp = dp, .sp = sp, .zero1 = zero1}, r, world, batch_rows);
  Trace t;
  for (int step = 0; step < kSteps; ++step) {
    const TimedStep s = session->step(step, 3e-3);
    t.loss.push_back(s.result.loss);
    t.norm.push_back(s.result.grad_norm);
  }
  return t;
}

double rel(double a, double b) { return std::abs(a - b) / std::max(1e-12, std::abs(b)); }

}  // namespace

int main(int argc, char** argv) {
  dist::MpiRuntime::init(&argc, &argv);
  int rc = dist::run_guarded([&] {
    auto world = dist::MpiRuntime::world();
    const int n = world->size(), rank = world->rank();
    Trace ref;
    if (rank == 0) ref = run(1, 1, false, false, nullptr);
    int failures = 0, passes = 0;
    for (int tp = 1; tp <= n; tp *= 2) {
      if (n % tp) continue;
      const int dp = n / tp;
      for (int variant = 0; variant < 4; ++variant) {
        const bool sp = variant & 1, zero1 = variant & 2;
        if ((sp && tp == 1) || (zero1 && dp == 1)) continue;
        Trace got = run(tp, dp, sp, zero1, world.get());
        if (rank != 0) continue;
        double worst = 0;
        for (int i = 0; i < kSteps; ++i)
          worst = std::max({worst, rel(got.loss[i], ref.loss[i]), rel(got.norm[i], ref.norm[i])});
        if (std::getenv("BATON_VERBOSE"))
          for (int i = 0; i < kSteps; ++i)
            std::printf("  step %d loss %.9f/%.9f norm %.9f/%.9f\n", i, got.loss[i], ref.loss[i], got.norm[i], ref.norm[i]);
        const bool ok = worst < 1e-4;
        failures += !ok;
        passes += ok;
        std::printf("%s tp=%d dp=%d sp=%d zero1=%d: worst relative difference %.2e (loss %.6f -> %.6f)\n",
                    ok ? "PASS" : "FAIL", tp, dp, sp, zero1, worst, got.loss.front(), got.loss.back());
      }
    }
    if (rank == 0) std::printf("%d passed, %d failed\n", passes, failures);
    return world->all_reduce_scalar(failures) == 0 ? 0 : 1;
  });
  dist::MpiRuntime::finalize();
  return rc;
}
