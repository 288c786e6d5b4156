// Partitions as runnable layouts and config snippets; see plan_snippet.h.
#include "app/plan_snippet.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "config/virtual_workers.h"
#include "core/error.h"
#include "pipeline/schedules.h"

namespace baton::app {
namespace {

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

RunLayout pipedream_layout(const plan::PdPlan& p) {
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

RunLayout madpipe_layout(const std::vector<plan::MpStage>& stages, const std::vector<int>& gpu_of_stage) {
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
  l.schedule = "2bw";
  l.notes.push_back("MadPipe's 1F1B* schedule does not train (baton schedule/plan only): 2bw keeps the same "
                    "two weight versions");
  return l;
}

HeteroLayout hetpipe_layout(const std::vector<VwPartition>& vws, int L, int nm) {
  HeteroLayout l;
  l.nm = nm;
  std::vector<std::string> left_out;
  for (size_t v = 0; v < vws.size(); ++v) {
    const VwPartition& vw = vws[v];
    if (!vw.feasible) {
      left_out.push_back(fmt::format("{} {}", v, vw.label));
      continue;
    }
    BATON_ASSERT(vw.devices.size() == vw.first_layer.size() && !vw.devices.empty(), "VW {}: {} devices, {} partitions",
                 v, vw.devices.size(), vw.first_layer.size());
    std::vector<std::string> stages;
    for (size_t q = 0; q < vw.devices.size(); ++q) {
      const int end = q + 1 < vw.first_layer.size() ? vw.first_layer[q + 1] : L;
      stages.push_back(fmt::format("{}@{}:{}-{}", l.ranks++, vw.devices[q], vw.first_layer[q], end));
    }
    l.virtual_workers.push_back(fmt::format("{}", fmt::join(stages, ", ")));
  }
  if (!left_out.empty())
    l.unexpressible = fmt::format("virtual worker{} {} fit{} no partition in memory at Nm = {}",
                                  left_out.size() == 1 ? "" : "s", fmt::join(left_out, ", "),
                                  left_out.size() == 1 ? "s" : "", nm);
  if (!left_out.empty() && !l.virtual_workers.empty())
    l.notes.push_back(fmt::format("closest runnable: the {} virtual workers that fit ({} ranks)",
                                  l.virtual_workers.size(), l.ranks));
  return l;
}

namespace {

using Section = std::pair<std::string, std::vector<std::pair<std::string, std::string>>>;

// "section.key=value" for every key of the sections.
std::vector<std::string> section_sets(const std::vector<Section>& sections) {
  std::vector<std::string> sets;
  for (const auto& [sec, keys] : sections)
    for (const auto& [k, v] : keys) sets.push_back(sec + "." + k + "=" + v);
  return sets;
}

// The snippet's text: the header, what is not runnable and the notes as comments, the run line
// (the keys as --sets), then the sections.
std::string snippet_text(const std::string& header, const std::string& unexpressible,
                         const std::vector<std::string>& notes, int ranks, const std::string& config_path,
                         const std::vector<std::string>& sets, const std::vector<Section>& sections) {
  std::string run = ranks > 1 ? fmt::format("mpirun -n {} baton train {}", ranks, config_path)
                              : fmt::format("baton train {}", config_path);
  for (const std::string& kv : sets) run += " --set " + shell_word(kv);
  std::string t = "# " + header + "\n";
  if (!unexpressible.empty()) t += "# not runnable as planned: " + unexpressible + "\n";
  for (const std::string& n : notes) t += "# note: " + n + "\n";
  t += fmt::format("# {} ranks; these keys replace the config's: run: {}\n", ranks, run);
  for (size_t i = 0; i < sections.size(); ++i) {
    t += (i ? "\n[" : "[") + sections[i].first + "]\n";
    for (const auto& [k, v] : sections[i].second) t += k + " = " + v + "\n";
  }
  return t;
}

}  // namespace

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
  const std::vector<Section> sections{{"train", train}, {"parallel", parallel}};
  Snippet s;
  s.ranks = l.ranks();
  s.sets = section_sets(sections);

  // What is printed must train: the config with these keys, for this many ranks.
  std::vector<std::string> all = overrides;
  all.insert(all.end(), s.sets.begin(), s.sets.end());
  try {
    const Config checked = load_config(config_path, all, s.ranks);
    check_trainable(checked);
  } catch (const Error& e) {
    throw Error(fmt::format("the planned layout does not train with {}: {}", config_path, e.what()), e.hint());
  }
  s.toml = snippet_text(header, l.unexpressible, l.notes, s.ranks, config_path, s.sets, sections);
  s.global_batch = global_batch;
  s.layout = std::move(l);
  return s;
}

HeteroSnippet make_hetero_snippet(const std::string& config_path, const std::vector<std::string>& overrides,
                                  const Config& cfg, int layers, HeteroLayout l, const std::string& header) {
  BATON_ASSERT(!l.virtual_workers.empty() && l.nm >= 1, "no virtual workers to run");
  const int n = static_cast<int>(l.virtual_workers.size());
  // Each VW runs minibatches of b = global_batch / N rows (docs/hetpipe.md, "The data split"), and
  // a VW of several stages runs each as one micro-batch: global_batch = micro_batch × N gives every
  // VW the planned minibatch of train.micro_batch rows.
  const int64_t global_batch = int64_t{cfg.train.micro_batch} * n;
  if (global_batch != cfg.train.global_batch)
    l.notes.push_back(fmt::format("train.global_batch {} -> {}: one minibatch of train.micro_batch = {} rows per "
                                  "virtual worker and step", cfg.train.global_batch, global_batch,
                                  cfg.train.micro_batch));
  const int64_t steps = (cfg.train.steps + l.nm - 1) / l.nm * l.nm;
  if (steps != cfg.train.steps)
    l.notes.push_back(fmt::format("train.steps {} -> {}: whole waves of Nm = {}", cfg.train.steps, steps, l.nm));
  std::vector<std::string> quoted;
  for (const std::string& vw : l.virtual_workers) quoted.push_back("\"" + vw + "\"");
  const std::vector<Section> sections{
      {"train", {{"micro_batch", std::to_string(cfg.train.micro_batch)},
                 {"global_batch", std::to_string(global_batch)},
                 {"steps", std::to_string(steps)}}},
      {"parallel", {{"tp", "1"}, {"pp", "1"}, {"vp", "1"}, {"schedule", "\"1f1b\""}, {"stages", "[]"},
                    {"replicas", "[]"}, {"zero1", "false"}}},
      {"hetero", {{"sync", "\"wsp\""},
                  {"nm", std::to_string(l.nm)},
                  {"cluster", "\"\""},
                  {"policy", "\"\""},
                  {"virtual_workers", fmt::format("[{}]", fmt::join(quoted, ", "))}}}};
  HeteroSnippet s;
  s.ranks = l.ranks;
  s.sets = section_sets(sections);
  std::vector<std::string> all = overrides;
  all.insert(all.end(), s.sets.begin(), s.sets.end());
  try {  // the keys load and the VWs cover the model's layers
    const Config checked = load_config(config_path, all, s.ranks);
    const std::vector<VirtualWorker> vws = virtual_workers(checked.hetero, s.ranks);
    for (size_t v = 0; v < vws.size(); ++v) vws[v].layer_ranges(layers, static_cast<int>(v));
    try {
      check_trainable(checked);
    } catch (const Error& e) {  // what the trainer does not run yet (docs/hetpipe.md)
      l.notes.push_back(fmt::format("this build's baton train refuses it yet: {}", e.what()));
    }
  } catch (const Error& e) {
    throw Error(fmt::format("the planned virtual workers do not load with {}: {}", config_path, e.what()), e.hint());
  }
  s.toml = snippet_text(header, l.unexpressible, l.notes, s.ranks, config_path, s.sets, sections);
  s.global_batch = global_batch;
  s.steps = steps;
  s.layout = std::move(l);
  return s;
}

}  // namespace baton::app
