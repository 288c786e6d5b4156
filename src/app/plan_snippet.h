// What `baton plan --algorithm pipedream|madpipe|hetpipe` hands to `baton train`: the partition as
// a layout the runtime runs (RunLayout: stages as [first, end) ranges of global layers, PipeDream's
// replicas, data-parallel copies, a schedule baton train executes), and that layout as config keys
// (Snippet: a TOML [train]/[parallel] snippet, the same keys as --set arguments, the mpirun line),
// checked by loading the config with them for their rank count (load_config + check_trainable), so
// a snippet that is printed trains.
//
// Where a partitioner's plan is not something the runtime runs — PipeDream replicas that differ on
// the first and last stage, MadPipe's special GPU with non-contiguous stages and its 1F1B*
// schedule, HetPipe's several virtual workers under WSP, weight stashing in bf16 — the layout is
// the closest one it runs, `unexpressible` says in one line what could not be expressed, and
// `notes` say how the layout differs from the plan.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "plan/madpipe.h"
#include "plan/pipedream_dp.h"

namespace baton::app {

struct RunLayout {
  std::vector<std::pair<int, int>> stages;  // [first, end) global layers, one per pipeline stage
  std::vector<int> replicas;                // ranks per stage (pipedream 1F1B-RR); empty = one each
  int dp = 1;                               // data-parallel copies of the pipeline
  std::string schedule = "1f1b";
  bool vertical_sync = false;
  std::string unexpressible;                // why the plan itself does not run; empty when it does
  std::vector<std::string> notes;
  int ranks() const;
};

// PipeDream §3.1-3.2 (notes-pipedream §1-2): stages with replication factors. One stage on N
// workers is data parallelism (dp = N, a flush schedule: pipedream needs pp > 1); otherwise the
// pipedream schedule with 1F1B-RR replicas. `dtype`: precision.compute (weight stashing is fp32).
RunLayout pipedream_layout(const plan::PdPlan& p, const std::string& dtype);
// MadPipe §C.3: stages in layer order and the GPU of each (madpipe_check's gpu_of_stage).
RunLayout madpipe_layout(const std::vector<plan::MpStage>& stages, const std::vector<int>& gpu_of_stage,
                         const std::string& dtype);
// HetPipe §A.5: the partition of one virtual worker (first layer of each GPU's partition, L layers)
// chosen among `vws` feasible ones; `label` names it (e.g. "VRGQ"), `mixed` when its GPUs differ.
RunLayout hetpipe_layout(const std::vector<int>& first_layer, int L, int vws, int chosen,
                         const std::string& label, bool mixed, const std::string& dtype);

struct Snippet {
  std::string toml;               // comments, [train] and [parallel] sections
  std::vector<std::string> sets;  // the same keys as "section.key=value"
  int ranks = 1;
  int64_t global_batch = 0;
  RunLayout layout;               // as given, with the global batch's note added
};

// The layout as config keys for `config_path` (loaded as `cfg` with `overrides`), with the
// global batch raised to the next one the layout accepts when the config's does not split (noted).
// `layers`: the model's global layers (the stages must end there). `header`: first comment line.
// Throws Error when the config does not accept the keys (a planner bug, or a config that does
// not train for reasons of its own, e.g. [hetero] keys).
Snippet make_snippet(const std::string& config_path, const std::vector<std::string>& overrides,
                     const Config& cfg, int layers, RunLayout l, const std::string& header);

}  // namespace baton::app
