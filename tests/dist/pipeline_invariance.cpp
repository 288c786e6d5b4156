// Layout invariance with pipeline parallelism (issue 5): a tiny 8-block GPT trained for a few steps
// under pipeline layouts — pp ∈ {2, 4}, vp ∈ {1, 2}, combined with tp = 2 (with and without
// sequence parallelism) or dp = 2 (with and without ZeRO-1), for gpipe, 1f1b, interleaved and
// zb-h1 — must give the single-process losses and grad norms within 1e-4 relative. Activation
// recomputation ("full", "selective") must give the same losses, single-process and pipelined.
// Run under mpirun; rank 0 computes the single-process reference itself before the parallel runs.
//   mpirun -np N pipeline_invariance      (N = 4 or 8: every listed layout of that world size)
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "core/rng.h"
#include "dist/comm.h"
#include "dist/guard.h"
#include "dist/rank_grid.h"
#include "tiny_gpt.h"
#include "train/pipeline_step.h"
#include "train/train_step.h"

using namespace baton;

namespace {

constexpr int kSteps = 10, kGlobalBatch = 16, kMicro = 1, kSeq = 8, kLayers = 8, kVocab = 37;

GptDims tiny_dims() { return test::tiny_gpt_dims(kLayers, kSeq, kVocab); }

// The same global batch for every layout (tiny_gpt.h).
void batch_rows(int64_t step, int row, int rows, int32_t* x, int32_t* y) {
  test::synthetic_rows(99, kSeq, kVocab, step, row, rows, x, y);
}

struct Layout {
  int tp = 1, dp = 1, pp = 1, vp = 1;
  std::string schedule = "1f1b";
  bool sp = false, zero1 = false;
  std::string recompute = "none";
};

struct Trace {
  std::vector<double> loss, norm;
};

Trace run(const Layout& L, dist::Comm* world) {
  auto be = make_cpu_backend();
  dist::ProcessGroups groups;
  TensorParallel tpc;
  if (world) {
    groups = dist::make_process_groups(*world, {L.tp, L.dp, L.pp});
    if (L.tp > 1)
      tpc = {.rank = groups.coord.tp, .size = L.tp, .sequence_parallel = L.sp, .comm = groups.tp.get()};
  }
  const int pp_rank = world ? groups.coord.pp : 0;
  GptModel model(tiny_dims(), *be, tpc, 16 * size_t(L.dp),
                 pipeline_chunks(kLayers, L.pp, L.vp, pp_rank), parse_recompute(L.recompute));
  model.init_weights(5);
  model.reserve(kMicro, kSeq, 1);
  DataParallelGrads grads(*be, model.table(), model.layer_of_param(),
                          L.dp > 1 ? groups.dp.get() : nullptr, L.zero1, 4096, tpc.rank == 0);
  if (L.pp > 1 && model.has_head() && !model.has_embedding())
    grads.exclude_from_norm(model.table(), model.tied_wte_param());
  OptimConfig oc;
  oc.weight_decay = 0.1;
  AdamW opt(*be, grads.segments(), grads.state_size(), oc);
  StepSetup s{.model = &model, .optimizer = &opt, .grads = &grads,
              .tp = L.tp > 1 ? groups.tp.get() : nullptr, .dp = L.dp > 1 ? groups.dp.get() : nullptr,
              .dp_rank = world ? groups.coord.dp : 0, .global_batch = kGlobalBatch,
              .micro_batch = kMicro, .seq_len = kSeq, .grad_clip = 1.0};
  std::unique_ptr<dist::Comm> embedding;
  std::unique_ptr<PipelineStep> pipe;
  if (L.pp > 1) {
    embedding = make_embedding_group(*groups.pp);
    pipe = std::make_unique<PipelineStep>(PipelineSetup{.step = s, .pp = groups.pp.get(),
                                                        .embedding = embedding.get(), .vp = L.vp,
                                                        .schedule = L.schedule});
  }
  Trace t;
  for (int step = 0; step < kSteps; ++step) {
    const double lr = 3e-3;
    StepResult r = pipe ? pipe->step(batch_rows, step, lr) : train_step(s, batch_rows, step, lr);
    t.loss.push_back(r.loss);
    t.norm.push_back(r.grad_norm);
  }
  return t;
}

double worst_difference(const Trace& got, const Trace& ref) {
  auto rel = [](double a, double b) { return std::abs(a - b) / std::max(1e-12, std::abs(b)); };
  double worst = 0;
  for (int i = 0; i < kSteps; ++i)
    worst = std::max({worst, rel(got.loss[i], ref.loss[i]), rel(got.norm[i], ref.norm[i])});
  return worst;
}

std::vector<Layout> layouts_for(int world) {
  std::vector<Layout> out;
  auto add = [&](Layout l) {
    if (l.tp * l.dp * l.pp == world) out.push_back(l);
  };
  for (const char* kind : {"gpipe", "1f1b", "zb-h1"}) {
    add({.dp = 2, .pp = 2, .schedule = kind});
    add({.tp = 2, .pp = 2, .schedule = kind});
    add({.pp = 4, .schedule = kind});
    add({.tp = 2, .pp = 4, .schedule = kind, .sp = std::string(kind) == "1f1b"});
    add({.dp = 2, .pp = 4, .schedule = kind, .zero1 = std::string(kind) == "1f1b"});
  }
  add({.dp = 2, .pp = 2, .vp = 2, .schedule = "interleaved", .zero1 = true});
  add({.tp = 2, .pp = 2, .vp = 2, .schedule = "interleaved", .sp = true});
  add({.pp = 4, .vp = 2, .schedule = "interleaved"});
  add({.tp = 2, .pp = 4, .vp = 2, .schedule = "interleaved"});
  add({.dp = 2, .pp = 4, .vp = 2, .schedule = "interleaved"});
  add({.tp = 2, .dp = 2, .pp = 2, .schedule = "1f1b", .sp = true, .zero1 = true});
  add({.tp = 2, .dp = 2, .pp = 2, .vp = 2, .schedule = "interleaved"});
  // Recomputation inside a pipeline.
  add({.pp = 4, .schedule = "1f1b", .recompute = "full"});
  add({.tp = 2, .pp = 2, .vp = 2, .schedule = "interleaved", .recompute = "selective"});
  add({.dp = 2, .pp = 4, .schedule = "1f1b", .recompute = "selective"});
  add({.tp = 2, .dp = 2, .pp = 2, .schedule = "zb-h1", .recompute = "full"});
  // zb-h1's split backward (BWD_INPUT / BWD_WEIGHT, Qi et al. §2) under sequence parallelism (its
  // collectives all in the input part) and selective recomputation.
  add({.tp = 2, .pp = 2, .schedule = "zb-h1", .sp = true});
  add({.tp = 2, .pp = 4, .schedule = "zb-h1", .recompute = "selective"});
  return out;
}

// zb-h1 against 1f1b on the same layout: the split backward computes the same ops and every
// stage's weight parts accumulate in micro-batch order, as 1f1b's backwards do, so the losses and
// norms must be bit-identical (tolerance 0).
std::vector<Layout> bitexact_for(int world) {
  std::vector<Layout> out;
  for (Layout l : {Layout{.dp = 2, .pp = 2, .schedule = "zb-h1"},
                   Layout{.pp = 4, .schedule = "zb-h1"},
                   Layout{.tp = 2, .pp = 2, .schedule = "zb-h1", .sp = true},
                   Layout{.tp = 2, .pp = 4, .schedule = "zb-h1"}})
    if (l.tp * l.dp * l.pp == world) out.push_back(l);
  return out;
}

std::string describe(const Layout& l) {
  return fmt::format("tp={} dp={} pp={} vp={} {}{}{}{}", l.tp, l.dp, l.pp, l.vp, l.schedule,
                     l.sp ? " sp" : "", l.zero1 ? " zero1" : "",
                     l.recompute != "none" ? " recompute=" + l.recompute : "");
}

}  // namespace

int main(int argc, char** argv) {
  dist::MpiRuntime::init(&argc, &argv);
  int rc = dist::run_guarded([&] {
    auto world = dist::MpiRuntime::world();
    const int rank = world->rank();
    int failures = 0, passes = 0;
    auto report = [&](const std::string& what, double worst, double tol, const Trace& got) {
      const bool ok = worst <= tol;
      failures += !ok;
      passes += ok;
      std::printf("%s %s: worst relative difference %.2e (loss %.6f -> %.6f)\n", ok ? "PASS" : "FAIL",
                  what.c_str(), worst, got.loss.front(), got.loss.back());
      std::fflush(stdout);
    };
    Trace ref;
    if (rank == 0) {
      ref = run({}, nullptr);
      // Recomputation changes memory, not arithmetic: bit-identical losses and norms.
      for (const char* mode : {"full", "selective"}) {
        Trace got = run({.recompute = mode}, nullptr);
        report(fmt::format("single process recompute={}", mode), worst_difference(got, ref), 0.0, got);
      }
    }
    for (const Layout& l : layouts_for(world->size())) {
      Trace got = run(l, world.get());
      if (rank == 0) report(describe(l), worst_difference(got, ref), 1e-4, got);
    }
    for (Layout l : bitexact_for(world->size())) {
      Trace zb = run(l, world.get());
      l.schedule = "1f1b";
      Trace ref1 = run(l, world.get());
      l.schedule = "zb-h1";
      if (rank == 0) report(describe(l) + " vs 1f1b (bit-exact)", worst_difference(zb, ref1), 0.0, zb);
    }
    if (rank == 0) std::printf("%d passed, %d failed\n", passes, failures);
    return world->all_reduce_scalar(failures) == 0 ? 0 : 1;
  });
  dist::MpiRuntime::finalize();
  return rc;
}
