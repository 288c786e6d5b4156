// Simulation: run a lowered Program on a model of the machine and report makespan, per-rank
// busy/idle time, the bubble, and peak activation slots and weight versions per rank. The same
// code serves `baton schedule`, the planner (with profiled costs) and the executor's checks.
//
// Machine model (an event simulation over all ranks):
// - every rank runs its instructions in order, one at a time;
// - compute ops take their stage's cost: FWD f, BWD b + w, BWD_INPUT b, BWD_WEIGHT w;
// - SEND_* is asynchronous and free for the sender; the message arrives `send` later (per sending
//   stage: send_act[s], send_grad[s]); RECV_* blocks until its message has arrived;
// - REDUCE_GRADS takes `reduce`; on a stage replicated inside the program (pipedream 1F1B-RR) it
//   is a collective: the n-th REDUCE_GRADS of the stage on every replica starts when the last
//   replica reaches it. REDUCE_TIED takes `tied`, a collective of the ranks that issue it (by
//   replica index). OPT_STEP takes `opt`; LOAD is free.
// A program whose ranks all block (a receive whose send never comes, a cycle of waits) is a
// deadlock: simulate throws an Error naming every stuck rank and what it waits for.
#pragma once
#include <optional>
#include <vector>

#include "pipeline/instr.h"

namespace baton::pipeline {

struct StageCost {
  double f = 1;  // forward of one microbatch
  double b = 1;  // input-gradient part of the backward (BWD_INPUT)
  double w = 1;  // weight-gradient part of the backward (BWD_WEIGHT); BWD costs b + w
};

struct Costs {
  std::vector<StageCost> stage;  // per model stage, size pp·vp
  std::vector<double> send_act;  // per sending stage (empty: 0)
  std::vector<double> send_grad; // per sending stage (empty: 0)
  double reduce = 0;             // REDUCE_GRADS
  double tied = 0;               // REDUCE_TIED
  double opt = 0;                // OPT_STEP

  // The CLI's `--costs F,B[,W]`: per-rank costs of one microbatch through the rank's whole share of
  // the model, so a chunk of an interleaved rank costs F/vp, B/vp, W/vp. With W given, BWD costs
  // B + W and splits into BWD_INPUT = B and BWD_WEIGHT = W; without it BWD costs B and splits into
  // two halves. Either way the ideal time of a rank is microbatches × (F + B [+ W]).
  static Costs uniform(const Program& p, double F, double B, std::optional<double> W = {},
                       double send = 0);
};

struct SimResult {
  double makespan = 0;
  double ideal = 0;            // the busiest rank's compute time (what a bubble-free run takes)
  double bubble_fraction = 0;  // (makespan − ideal) / ideal
  std::vector<double> busy;    // per rank: compute time (FWD, BWD, BWD_INPUT, BWD_WEIGHT)
  std::vector<double> idle;    // per rank: makespan − busy
  std::vector<int> peak_activations;      // per rank: most (stage, microbatch) stashes live at once
  std::vector<int> peak_weight_versions;  // per rank: most versions one stage keeps at once
  std::vector<std::vector<double>> start, end;  // per rank, per instruction
};

// Peaks walk each rank's order; they need no costs (used by simulate and by tests).
struct MemoryPeaks {
  std::vector<int> activations, weight_versions;
};
MemoryPeaks memory_peaks(const Program& lowered);

SimResult simulate(const Program& lowered, const Costs& costs);

}  // namespace baton::pipeline
