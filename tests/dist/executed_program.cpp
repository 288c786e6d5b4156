// The lowered program is exactly what runs (issue 11): for every executable schedule kind of the
// registry, a TrainSession (as `baton train` builds it) records every instruction its executor
// runs, and on every rank the instructions executed over a program's life — one step for the flush
// kinds, a whole segment between drain points for the asynchronous ones — equal that rank's
// instruction list of the lowered program, in order, with nothing merged, skipped or added. Also
// for pp = 1 (a one-stage program) and replicated stages.
//   mpirun -np 4 executed_program
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "dist/comm.h"
#include "dist/guard.h"
#include "pipeline/schedules.h"
#include "pipeline/text.h"
#include "test_session.h"

using namespace baton;

namespace {

constexpr int kSteps = 4, kSeq = 8, kVocab = 37;

void batch_rows(int64_t step, int row, int rows, int32_t* x, int32_t* y) {
  test::synthetic_rows(5, kSeq, kVocab, step, row, rows, x, y);
}

// Layouts of 4 ranks that exercise `kind`.
std::vector<test::TestLayout> layouts_for(const pipeline::ScheduleTraits& t) {
  const std::string k(t.name);
  std::vector<test::TestLayout> out;
  if (t.interleaving) {
    out.push_back({.dp = 2, .pp = 2, .vp = 2, .schedule = k});
    out.push_back({.pp = 4, .vp = 2, .schedule = k});
    return out;
  }
  out.push_back({.pp = 4, .schedule = k, .drain_every = 2});
  out.push_back({.tp = 2, .pp = 2, .schedule = k, .drain_every = 2});
  if (t.synchronous()) out.push_back({.dp = 4, .schedule = k});  // pp = 1: one stage
  if (t.replicas) out.push_back({.pp = 4, .schedule = k, .drain_every = 2, .replicas = {2, 2}});
  if (t.vertical_sync) out.push_back({.pp = 4, .schedule = k, .vertical_sync = true});
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  dist::MpiRuntime::init(&argc, &argv);
  int rc = dist::run_guarded([&] {
    auto world = dist::MpiRuntime::world();
    const int rank = world->rank();
    int failures = 0, passes = 0;
    const test::TestRun run{.dims = test::tiny_gpt_dims(8, kSeq, kVocab), .global_batch = 8,
                            .micro_batch = 1, .steps = kSteps};
    for (const pipeline::ScheduleTraits& t : pipeline::schedule_registry()) {
      if (!t.executable) continue;
      for (const test::TestLayout& l : layouts_for(t)) {
        auto session = test::test_session(l, run, world.get(), batch_rows, {.record_instructions = true});
        std::vector<pipeline::Instr> ran;
        int programs = 0, mismatches = 0;
        size_t instructions = 0;
        for (int step = 0; step < kSteps; ++step) {
          session->step(step, 1e-3);
          const auto& trace = session->runner().last_stats().trace;
          ran.insert(ran.end(), trace.begin(), trace.end());
          if (!session->runner().drained()) continue;
          // The program is complete: what ran is its instruction list for this rank.
          const std::vector<pipeline::Instr>& want = session->runner().executor().instructions();
          mismatches += ran != want;
          if (ran != want && ran.size() == want.size())
            for (size_t i = 0; i < ran.size(); ++i)
              if (!(ran[i] == want[i])) {
                std::printf("rank %d %s: instruction %zu ran %s, program has %s\n", rank, t.name.data(), i,
                            pipeline::to_text(ran[i]).c_str(), pipeline::to_text(want[i]).c_str());
                break;
              }
          instructions += want.size();
          ++programs;
          ran.clear();
        }
        const bool ok = world->all_reduce_scalar(mismatches + (programs == 0 ? 1 : 0)) == 0;
        const double total = world->all_reduce_scalar(double(instructions));
        failures += !ok;
        passes += ok;
        if (rank == 0)
          std::printf("%s %s tp=%d dp=%d pp=%d vp=%d%s%s: %d program(s) on this rank, %.0f instructions "
                      "run on all ranks, executed == lowered\n",
                      ok ? "PASS" : "FAIL", t.name.data(), l.tp, l.dp, l.pp, l.vp,
                      l.replicas.empty() ? "" : " replicas=2,2", l.vertical_sync ? " vertical_sync" : "",
                      programs, total);
      }
    }
    if (rank == 0) std::printf("%d passed, %d failed\n", passes, failures);
    return failures == 0 ? 0 : 1;
  });
  dist::MpiRuntime::finalize();
  return rc;
}
