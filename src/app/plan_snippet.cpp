// Partitions as runnable layouts and config snippets; see plan_snippet.h.
#include "app/plan_snippet.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "core/error.h"
#include "pipeline/schedules.h"

namespace baton::app {
namespace {

// Weight stashing (pipedream, 2bw) trains in fp32 only (config/trainable.cpp).
bool stashing_trains(const std::string& dtype) { return dtype == "fp32"; }

std::string stage_list(const std::vector<std::pair<int, int>>& st) {
  std::vector<std::string> s;
  for (auto [a, b] : st) s.push_back(fmt::format("[{}, {}]", a, b));
  return fmt::format("[{}]", fmt::join(s, ", "));
}

// A --set argument as one shell word.
std::string shell_word(const std::string& s) {
  if (s.find_first_of(" []\"'$") == std::string::npos) return s;
  return "'" + s + "'";
}

}  // namespace

int RunLayout::ranks() const {
  const int per_pipeline =
      replicas.empty() ? static_cast<int>(stages.size()) : std::accumulate(replicas.begin(), replicas.end(), 0);
  return dp * per_pipeline;
}

RunLayout pipedream_layout(const plan::PdPlan& p, const std::string& dtype) {
  RunLayout l;
  std::vector<int> r;
  for (const plan::PdStage& s : p.stages) {
    l.stages.push_back({s.first, s.last + 1});
    r.push_back(s.replicas);
  }
  if (l.stages.size() == 1) {
    // PipeDream's "plain DP is a single replicated stage" (§3): data parallelism, which baton runs
    // with all-reduce and a flush schedule (the asynchronous ones need pp > 1).
    l.dp = r[0];
    if (l.dp > 1) l.notes.push_back(fmt::format("one stage on {} workers is data parallelism: dp = {}", l.dp, l.dp));
    return l;
  }
  const bool replicated = std::any_of(r.begin(), r.end(), [](int x) { return x > 1; });
  if (!stashing_trains(dtype)) {
    l.unexpressible = fmt::format("PipeDream's weight stashing does not train in {} (precision.compute)", dtype);
    const bool uniform = std::all_of(r.begin(), r.end(), [&](int x) { return x == r[0]; });
    if (uniform) l.dp = r[0];
    l.notes.push_back(fmt::format("closest runnable: the same stages with the 1f1b flush schedule{}",
                                  !replicated ? ""
                                  : uniform   ? fmt::format(", the {} replicas as data parallelism", r[0])
                                              : ", unreplicated"));
    return l;
  }
  l.schedule = "pipedream";
  if (!replicated) return l;
  l.replicas = r;
  if (r.front() != r.back()) {
    // config/validate.cpp: the first and the last stage have as many replicas (a GPT's tied
    // embedding is updated on both together).
    l.unexpressible = fmt::format(
        "PipeDream's {} replicates the first stage {}x and the last {}x; baton train needs the same count on "
        "both (parallel.replicas)",
        fmt::join(r, "-"), r.front(), r.back());
    l.replicas.front() = l.replicas.back() = std::min(r.front(), r.back());
    l.notes.push_back(fmt::format("closest runnable: replicas {} on {} of the {} workers planned",
                                  fmt::join(l.replicas, "-"), l.ranks(), p.workers));
    if (std::all_of(l.replicas.begin(), l.replicas.end(), [](int x) { return x == 1; }))
      l.replicas.clear();  // canonical form: no replication
  }
  return l;
}

RunLayout madpipe_layout(const std::vector<plan::MpStage>& stages, const std::vector<int>& gpu_of_stage,
                         const std::string& dtype) {
  BATON_ASSERT(stages.size() == gpu_of_stage.size(), "{} stages, {} GPUs", stages.size(), gpu_of_stage.size());
  RunLayout l;
  // Adjacent stages on one GPU are one contiguous range: merge them.
  std::vector<int> gpu;
  for (size_t s = 0; s < stages.size(); ++s) {
    const int first = stages[s].first - 1, end = stages[s].last;  // 1-based inclusive -> [first, end)
    if (!gpu.empty() && gpu.back() == gpu_of_stage[s]) {
      l.stages.back().second = end;
      continue;
    }
    l.stages.push_back({first, end});
    gpu.push_back(gpu_of_stage[s]);
  }
  for (size_t s = 0; s < gpu.size(); ++s) {
    const auto twice = std::find(gpu.begin(), gpu.begin() + s, gpu[s]);
    if (twice == gpu.begin() + s || !l.unexpressible.empty()) continue;
    const size_t t = twice - gpu.begin();
    l.unexpressible = fmt::format(
        "MadPipe's special GPU {} holds the non-contiguous stages [{}, {}) and [{}, {}); baton train gives each "
        "pipeline rank one contiguous range of layers",
        gpu[s], l.stages[t].first, l.stages[t].second, l.stages[s].first, l.stages[s].second);
  }
  const int gpus = static_cast<int>(std::set<int>(gpu.begin(), gpu.end()).size());
  if (!l.unexpressible.empty())
    l.notes.push_back(fmt::format("closest runnable: each of the {} stages on its own rank ({} ranks for the {} "
                                  "GPUs planned)",
                                  l.stages.size(), l.stages.size(), gpus));
  if (l.stages.size() == 1) return l;
  // 1F1B* (§C.2) is simulated, not executed. Its memory model keeps two weight versions (§C.1 (a),
  // from PipeDream-2BW), so 2bw is the executed schedule closest to it.
  if (stashing_trains(dtype)) {
    l.schedule = "2bw";
    l.notes.push_back("MadPipe's 1F1B* schedule does not train (baton schedule/plan only): 2bw keeps the same "
                      "two weight versions");
  } else {
    l.notes.push_back(fmt::format("MadPipe's 1F1B* schedule does not train, nor does 2bw in {}: 1f1b (flush) runs "
                                  "the stages", dtype));
  }
  return l;
}

RunLayout hetpipe_layout(const std::vector<int>& first_layer, int L, int vws, int chosen, const std::string& label,
                         bool mixed, const std::string& dtype) {
  RunLayout l;
  for (size_t q = 0; q < first_layer.size(); ++q)
    l.stages.push_back({first_layer[q], q + 1 < first_layer.size() ? first_layer[q + 1] : L});
  if (vws > 1)
    l.unexpressible = fmt::format(
        "HetPipe's {} virtual workers of several stages kept in sync by WSP ([hetero]) do not train yet (only "
        "virtual workers of one rank do): the snippet runs virtual worker {} ({}) alone",
        vws, chosen, label);
  if (mixed)
    l.notes.push_back(fmt::format("its GPUs differ: launch so that rank q runs on GPU q of {}", label));
  if (l.stages.size() == 1) return l;
  // Inside a virtual worker a minibatch sees the local updates of all minibatches s_local + 1 before
  // it and every stage uses the same version — PipeDream's vertical sync (notes-hetpipe-madpipe §A).
  if (stashing_trains(dtype)) {
    l.schedule = "pipedream";
    l.vertical_sync = true;
    l.notes.push_back("HetPipe's pipelined updates inside a virtual worker run as pipedream with vertical sync");
  } else {
    l.notes.push_back(fmt::format("weight stashing does not train in {}: 1f1b (flush) runs the partition", dtype));
  }
  return l;
}

Snippet make_snippet(const std::string& config_path, const std::vector<std::string>& overrides, const Config& cfg,
                     int layers, RunLayout l, const std::string& header) {
  BATON_ASSERT(!l.stages.empty() && l.stages.front().first == 0 && l.stages.back().second == layers,
               "stages {} do not cover the {} layers", stage_list(l.stages), layers);
  const int pp = static_cast<int>(l.stages.size());
  // Micro-batches per step: the config's global batch rounded up to what the layout splits evenly
  // (micro_batch × dp; a multiple of every replica count; 2bw's m >= pp).
  const int64_t unit = int64_t{cfg.train.micro_batch} * l.dp;
  int64_t m = std::max<int64_t>(1, (cfg.train.global_batch + unit - 1) / unit);
  int64_t every = 1;
  for (int r : l.replicas) every = std::lcm(every, int64_t{r});
  m = (m + every - 1) / every * every;
  if (pipeline::schedule_traits(l.schedule).min_microbatches_pp) m = std::max<int64_t>(m, pp);
  const int64_t global_batch = m * unit;
  if (global_batch != cfg.train.global_batch)
    l.notes.push_back(fmt::format("train.global_batch {} -> {}: {} micro-batches of {} per step{}",
                                  cfg.train.global_batch, global_batch, m * l.dp, cfg.train.micro_batch,
                                  every > 1 ? fmt::format(", a multiple of the replica counts") : ""));
  std::vector<std::pair<std::string, std::string>> train{
      {"micro_batch", std::to_string(cfg.train.micro_batch)}, {"global_batch", std::to_string(global_batch)}};
  std::vector<std::pair<std::string, std::string>> parallel{
      {"tp", "1"},
      {"pp", std::to_string(pp)},
      {"vp", "1"},
      {"schedule", fmt::format("\"{}\"", l.schedule)},
      {"stages", stage_list(l.stages)},
      {"replicas", fmt::format("[{}]", fmt::join(l.replicas, ", "))},
      {"vertical_sync", l.vertical_sync ? "true" : "false"},
      {"recompute", "\"none\""},
      {"sequence_parallel", "false"},
      {"scatter_gather", "false"}};
  Snippet s;
  s.ranks = l.ranks();
  for (const auto& [k, v] : train) s.sets.push_back("train." + k + "=" + v);
  for (const auto& [k, v] : parallel) s.sets.push_back("parallel." + k + "=" + v);

  // What is printed must train: the config with these keys, for this many ranks.
  std::vector<std::string> all = overrides;
  all.insert(all.end(), s.sets.begin(), s.sets.end());
  try {
    const Config checked = load_config(config_path, all, s.ranks);
    check_trainable(checked);
  } catch (const Error& e) {
    throw Error(fmt::format("the planned layout does not train with {}: {}", config_path, e.what()), e.hint());
  }

  std::string run = s.ranks > 1 ? fmt::format("mpirun -n {} baton train {}", s.ranks, config_path)
                                : fmt::format("baton train {}", config_path);
  for (const std::string& kv : s.sets) run += " --set " + shell_word(kv);
  s.toml = "# " + header + "\n";
  if (!l.unexpressible.empty()) s.toml += "# not runnable as planned: " + l.unexpressible + "\n";
  for (const std::string& n : l.notes) s.toml += "# note: " + n + "\n";
  s.toml += fmt::format("# {} ranks; these keys replace the config's: run: {}\n", s.ranks, run);
  s.toml += "[train]\n";
  for (const auto& [k, v] : train) s.toml += k + " = " + v + "\n";
  s.toml += "\n[parallel]\n";
  for (const auto& [k, v] : parallel) s.toml += k + " = " + v + "\n";
  s.global_batch = global_batch;
  s.layout = std::move(l);
  return s;
}

}  // namespace baton::app
