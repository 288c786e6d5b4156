// What `baton plan --algorithm pipedream|madpipe|hetpipe` hands to `baton train`: the partition as
// a layout the runtime runs (RunLayout: stages as [first, end) ranges of global layers, PipeDream's
// replicas, data-parallel copies, a schedule baton train executes), and that layout as config keys
// (Snippet: a TOML [train]/[parallel] snippet, the same keys as --set arguments, the mpirun line;
// HetPipe's virtual workers as HeteroLayout / HeteroSnippet with a [hetero] section),
// checked by loading the config with them for their rank count (load_config + check_trainable), so
// a snippet that is printed trains.
//
// Where a partitioner's plan is not something the runtime runs — PipeDream replicas that differ on
// the first and last stage, MadPipe's special GPU with non-contiguous stages and its 1F1B*
// schedule, a HetPipe virtual worker that does not fit — the layout is
// the closest one it runs, `unexpressible` says in one line what could not be expressed, and
// `notes` say how the layout differs from the plan.
#pragma once
#include <cstdint>
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
// pipedream schedule with 1F1B-RR replicas.
RunLayout pipedream_layout(const plan::PdPlan& p);
// MadPipe §C.3: stages in layer order and the GPU of each (madpipe_check's gpu_of_stage).
RunLayout madpipe_layout(const std::vector<plan::MpStage>& stages, const std::vector<int>& gpu_of_stage);
// HetPipe §7 and §8.1 (notes-hetpipe-madpipe §A.5–A.6) under WSP ([hetero], docs/hetpipe.md):
// virtual workers of several stages, each stage one rank that stands for one GPU. Ranks are numbered 0.. in VW order, stage order.
struct VwPartition {
  std::string label;                 // "VRGQ"
  std::vector<std::string> devices;  // per GPU, the device table's name (plan/device.h find_device)
  std::vector<int> first_layer;      // per GPU, the first layer of its partition
  bool feasible = true;              // false: no partition fits at the plan's Nm
};
struct HeteroLayout {
  std::vector<std::string> virtual_workers;  // hetero.virtual_workers entries: RANK@DEVICE:FIRST-END, ...
  int nm = 1;
  std::string unexpressible;                 // why the plan itself does not run; empty when it does
  std::vector<std::string> notes;
  int ranks = 0;
};
// The planned VWs on a model of L global layers at Nm: the feasible ones (a VW that does not fit
// is left out, and said so in `unexpressible`).
HeteroLayout hetpipe_layout(const std::vector<VwPartition>& vws, int L, int nm);

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

// The VWs as a [train]/[parallel]/[hetero] snippet: sync = "wsp", nm, virtual_workers;
// train.global_batch raised to a multiple of micro_batch × ranks (load_config's data-parallel rule;
// a note says when a VW's minibatch, global_batch / VWs, is not the planned micro_batch) and
// train.steps to whole waves (noted). Checked by loading the config with these keys for their rank
// count and parsing the VWs (virtual_workers(), layer ranges covering the `layers`); Error when
// that fails. `baton train`'s own refusals (check_trainable) become a note, not an error.
struct HeteroSnippet {
  std::string toml;
  std::vector<std::string> sets;
  int ranks = 0;
  int64_t global_batch = 0, steps = 0;
  HeteroLayout layout;  // as given, with notes added
};
HeteroSnippet make_hetero_snippet(const std::string& config_path, const std::vector<std::string>& overrides,
                                  const Config& cfg, int layers, HeteroLayout l, const std::string& header);

}  // namespace baton::app
