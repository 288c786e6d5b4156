// Measured pipeline bubble against the simulator (issue 5 "Measure"): trains a small GPT with the
// executor under `kind` (1f1b, interleaved with vp = 2, zb-h1) on pp = world ranks for m
// micro-batches, measures every rank's compute time per model stage — F, B and, for zb-h1's split
// backward (Qi et al. §2), B = BWD_INPUT and W = BWD_WEIGHT separately — and the step's makespan
// (from a barrier to the last compute op of any rank), and prints the measured idle fraction next
// to what `simulate` predicts for the measured per-stage costs.
//   mpirun -np 4 pipeline_bubble [m ...]       (default: 8 16; BATON_BENCH_D_MODEL sets d_model, default 256)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/rng.h"
#include "dist/comm.h"
#include "dist/guard.h"
#include "pipeline/lower.h"
#include "pipeline/schedules.h"
#include "pipeline/simulate.h"
#include "../dist/test_session.h"

using namespace baton;

namespace {

constexpr int kSeq = 64, kLayers = 8, kVocab = 512, kWarm = 2, kTimed = 6;

void batch_rows(int64_t step, int row, int rows, int32_t* x, int32_t* y) {
  for (int r = 0; r < rows; ++r)
    for (int t = 0; t <= kSeq; ++t) {
      const int32_t tok = static_cast<int32_t>(mix({7, uint64_t(step), uint64_t(row + r), uint64_t(t)}) % kVocab);
      if (t < kSeq) x[r * kSeq + t] = tok;
      if (t > 0) y[r * kSeq + t - 1] = tok;
    }
}

void measure(dist::Comm& world, const std::string& kind, int vp, int m) {
  const int pp = world.size(), rank = world.rank();
  const char* d_env = std::getenv("BATON_BENCH_D_MODEL");
  GptDims d{.n_layer = kLayers, .n_head = 4, .d_model = d_env ? std::atoi(d_env) : 256, .seq_len = kSeq, .vocab = kVocab,
            .vocab_padded = kVocab};
  const test::TestRun run{.dims = d, .global_batch = m, .micro_batch = 1, .steps = kWarm + kTimed,
                          .init_seed = 1, .bucket_mb = 4.0};
  auto session = test::test_session({.pp = pp, .vp = vp, .schedule = kind}, run, &world, batch_rows);
  dist::Comm& pp_comm = *session->groups().pp;
  // Per-rank sums over the timed steps: compute, makespan, per-chunk fwd/bwd.
  double busy = 0, span = 0;
  std::vector<double> f(vp, 0), b(vp, 0), w(vp, 0);
  for (int step = 0; step < kWarm + kTimed; ++step) {
    pp_comm.barrier();
    session->step(step, 1e-4);
    if (step < kWarm) continue;
    const pipeline::ExecStats& st = session->runner().last_stats();
    busy += st.compute;
    span += pp_comm.all_reduce_scalar(st.last_compute_end, dist::ReduceOp::MAX);
    for (int c = 0; c < vp; ++c) {
      f[c] += st.fwd[c] / st.fwd_count[c];
      b[c] += st.bwd[c] / st.bwd_count[c];
      if (st.wgt_count[c] > 0) w[c] += st.wgt[c] / st.wgt_count[c];
    }
  }
  // Per model stage costs (stage c·pp + r is chunk c of rank r), averaged over the timed steps.
  std::vector<double> fs(pp * vp, 0), bs(pp * vp, 0), ws(pp * vp, 0), busy_all(pp, 0);
  for (int c = 0; c < vp; ++c) {
    fs[c * pp + rank] = f[c] / kTimed;
    bs[c * pp + rank] = b[c] / kTimed;
    ws[c * pp + rank] = w[c] / kTimed;
  }
  busy_all[rank] = busy / kTimed;
  pp_comm.all_reduce(fs.data(), fs.size(), dist::DType::F64, dist::ReduceOp::SUM);
  pp_comm.all_reduce(bs.data(), bs.size(), dist::DType::F64, dist::ReduceOp::SUM);
  pp_comm.all_reduce(ws.data(), ws.size(), dist::DType::F64, dist::ReduceOp::SUM);
  pp_comm.all_reduce(busy_all.data(), busy_all.size(), dist::DType::F64, dist::ReduceOp::SUM);
  if (rank != 0) return;
  const double makespan = span / kTimed;
  const pipeline::Program& prog = session->runner().executor().program();
  pipeline::Costs costs;
  // Flush kinds: BWD costs b + w with w = 0 (b measured whole); zb-h1: I = b, W = w as measured.
  for (int s2 = 0; s2 < pp * vp; ++s2) costs.stage.push_back({.f = fs[s2], .b = bs[s2], .w = ws[s2]});
  const pipeline::SimResult sim = pipeline::simulate(prog, costs);
  const double ideal = *std::max_element(busy_all.begin(), busy_all.end());
  double idle_meas = 0, idle_sim = 0;
  for (int r = 0; r < pp; ++r) {
    idle_meas += (1 - busy_all[r] / makespan) / pp;
    idle_sim += sim.idle[r] / sim.makespan / pp;
  }
  double F = 0, Bc = 0, W = 0;
  for (int s2 = 0; s2 < pp * vp; ++s2) {
    F += fs[s2] / (pp * vp);
    Bc += bs[s2] / (pp * vp);
    W += ws[s2] / (pp * vp);
  }
  std::printf("%-12s pp=%d vp=%d m=%2d | F %.2f B %.2f W %.2f ms (mean per stage) | makespan %.1f ms (sim %.1f) | bubble (makespan-ideal)/ideal: "
              "measured %.3f, simulated %.3f | mean idle fraction: measured %.3f, simulated %.3f\n",
              kind.c_str(), pp, vp, m, F * 1e3, Bc * 1e3, W * 1e3, makespan * 1e3, sim.makespan * 1e3, (makespan - ideal) / ideal,
              sim.bubble_fraction, idle_meas, idle_sim);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  dist::MpiRuntime::init(&argc, &argv);
  int rc = dist::run_guarded([&] {
    auto world = dist::MpiRuntime::world();
    std::vector<int> ms;
    for (int i = 1; i < argc; ++i) ms.push_back(std::atoi(argv[i]));
    if (ms.empty()) ms = {8, 16};
    for (int m : ms) {
      measure(*world, "1f1b", 1, m);
      measure(*world, "interleaved", 2, m);
      measure(*world, "zb-h1", 1, m);
    }
    return 0;
  });
  dist::MpiRuntime::finalize();
  return rc;
}
