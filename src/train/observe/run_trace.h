// The job's measured timeline (`run.trace`; docs/schedules.md "The measured timeline"): every
// rank's pipeline::Timeline gathered on rank 0 into one Chrome-trace JSON, beside the simulator's
// prediction of the same schedule for the same layout, so the two can be compared in Perfetto.
//
// Measured part: one process per world rank ("rank r: stage s, group g"), one track per kind of
// work (compute, receive waits, sends, reductions + optimizer, data loads, steps + evaluation +
// checkpoints). Times are microseconds from the job's start, each rank's clock aligned at a barrier
// taken once when the trace starts (so ranks agree to the barrier's exit skew: microseconds on one
// node). Predicted part: one process per pipeline rank, the lowered program simulated with the
// measured median cost of each model stage's F, B (and W), of REDUCE_GRADS, REDUCE_TIED and
// OPT_STEP, and free messages — what the schedule alone costs; for flush kinds one predicted step
// drawn at the start of every measured step, for asynchronous kinds the traced steps once.
#pragma once
#include <string>
#include <vector>

#include "dist/comm.h"
#include "dist/layout.h"
#include "pipeline/instr.h"
#include "pipeline/timeline.h"

namespace baton {

// What the trace shows of its run, per rank and predicted, for the log and the tests.
struct RunTraceSummary {
  int events = 0;                    // measured events of every rank
  std::vector<double> idle_share;    // per world rank: 1 − compute time / its pipeline's step spans
  std::vector<double> predicted_idle_share;  // per pipeline rank, the simulator's
};

// The trace document from every rank's events (times: seconds, rank r's origin already
// subtracted). `program`: the lowered program one pipeline ran (any number of steps; re-generated
// for the prediction). Pure: no communicator.
std::string run_trace_json(const std::vector<std::vector<pipeline::TimelineEvent>>& ranks,
                           const dist::Layout& layout, const pipeline::Program& program,
                           RunTraceSummary* summary = nullptr);

// Collective over `world`: gathers `timeline` (times relative to this rank's `origin`) on rank 0,
// which writes `path` (through a temporary name) and returns the summary; the other ranks return
// an empty one. Throws Error naming the file when it cannot be written.
RunTraceSummary write_run_trace(const pipeline::Timeline& timeline, double origin, dist::Comm& world,
                                const dist::Layout& layout, const pipeline::Program& program,
                                const std::string& path);

}  // namespace baton
