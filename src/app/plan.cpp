// `baton plan CONFIG --cluster FILE [--algorithm ptdp|pipedream|hetpipe|madpipe] [--gpus N] [--top K]
// [--evaluate] [--format table|json] [--output FILE] [--profile PROFILE.json]
// [--schedules KINDS] [--recompute MODES]`.
// ptdp (default): the PTD-P layout search (src/plan/ptdp.h) for the config's GPT on a cluster
// file — over the synchronous schedule kinds unless --schedules names others, and over the
// --recompute modes — or, with --evaluate, the prediction for the layout the config already has. Prints the
// candidates and the best one as a TOML snippet that `baton train` accepts (also written to
// --output). --profile uses `baton profile`'s measured per-layer times and memory (plan/profile.h).
// The partitioners, for the config's model (GPT, or any CNN the runtime builds — model.kind =
// "vgg"/"resnet", described from CnnBuilder layer for layer, app/plan_model.h — with
// train.micro_batch images per minibatch): pipedream (notes-pipedream §2): stages, replication
// factors, NOAM; hetpipe (notes-hetpipe-madpipe §A.2, §A.5–A.6, app/hetpipe_plan.h): virtual
// workers by --policy np|ed|hd, Nm (the smallest Max_m unless --nm) and each one's partition;
// madpipe (§C): the phase-1 allocation, its period checked by simulating the 1F1B* schedule
// (madpipe_check) and the memory per GPU. Each prints (and --output writes) the partition as a
// snippet that `baton train` runs — [train]/[parallel], or for hetpipe [hetero] with the virtual
// workers under WSP — or the closest layout it runs with a line saying what could not be expressed
// (app/plan_snippet.h). Assumptions are in docs/planner.md.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>

#include "app/app.h"
#include "app/hetpipe_plan.h"
#include "app/plan_chain.h"
#include "app/plan_model.h"
#include "app/plan_snippet.h"
#include "backend/device.h"
#include "config/config.h"
#include "core/error.h"
#include "pipeline/stage_memory.h"
#include "plan/cluster.h"
#include "plan/cost_model.h"
#include "plan/hetpipe.h"
#include "plan/madpipe.h"
#include "plan/pipedream_dp.h"
#include "plan/profile.h"
#include "plan/ptdp.h"

namespace baton::app {
namespace {

plan::Layout layout_of(const Config& cfg) {
  plan::Layout l;
  l.tp = cfg.parallel.tp;
  l.pp = cfg.parallel.pp;
  l.vp = cfg.parallel.vp;
  l.dp = cfg.dp;
  l.micro_batch = cfg.train.micro_batch;
  l.schedule = cfg.parallel.schedule;
  l.recompute = cfg.parallel.recompute;
  l.sequence_parallel = cfg.parallel.sequence_parallel;
  l.scatter_gather = cfg.parallel.scatter_gather;
  l.zero1 = cfg.parallel.zero1;
  return l;
}

std::string toml_snippet(const plan::Prediction& p, int gpus) {
  const auto& l = p.layout;
  return fmt::format(
      "# baton plan: predicted {:.3f} s/step, {:.0f} tokens/s, {:.1f} TFLOP/s per GPU; run on {} "
      "ranks (dp = {})\n"
      "[train]\nmicro_batch = {}\n\n[parallel]\ntp = {}\npp = {}\nvp = {}\nschedule = \"{}\"\n"
      "recompute = \"{}\"\nsequence_parallel = {}\nscatter_gather = {}\nzero1 = {}\n",
      p.step_time_s, p.tokens_per_s, p.tflops_per_gpu, gpus, l.dp, l.micro_batch, l.tp, l.pp, l.vp,
      l.schedule, l.recompute, l.sequence_parallel, l.scatter_gather, l.zero1);
}

// ---- the partitioners (--algorithm pipedream|hetpipe|madpipe) ----

using nlohmann::json;

// Prints the plan (table or JSON) and the layout baton train runs for it as a snippet (`toml`),
// which --output also gets; `runnable` is the layout as JSON.
void print_plan(const PlanOptions& o, json j, std::string table, const std::string& toml, json runnable,
                const std::string& unexpressible) {
  if (!o.output.empty()) {
    std::ofstream f(o.output);
    if (!(f << toml)) throw Error(fmt::format("cannot write {}", o.output), "check the directory exists");
  }
  j["runnable"] = std::move(runnable);
  j["toml"] = toml;
  if (o.format == "json") {
    std::puts(j.dump(2).c_str());
    return;
  }
  if (!unexpressible.empty()) table += "not runnable as planned: " + unexpressible + "\n";
  table += fmt::format("\n{} as config{}:\n{}", unexpressible.empty() ? "runnable layout" : "closest runnable layout",
                       o.output.empty() ? "" : " (written to " + o.output + ")", toml);
  std::fputs(table.c_str(), stdout);
}

void emit(const PlanOptions& o, const Config& cfg, const Chain& ch, json j, std::string table,
          const RunLayout& layout, const std::string& header) {
  const Snippet sn = make_snippet(o.config, o.overrides, cfg, ch.md.size(), layout, header);
  const RunLayout& l = sn.layout;
  json stages = json::array();
  for (auto [a, b] : l.stages) stages.push_back({a, b});
  json runnable = {{"exact", l.unexpressible.empty()}, {"unexpressible", l.unexpressible},
                   {"notes", l.notes}, {"ranks", sn.ranks}, {"pp", l.stages.size()}, {"dp", l.dp},
                   {"stages", stages}, {"replicas", l.replicas}, {"schedule", l.schedule},
                   {"vertical_sync", l.vertical_sync}, {"global_batch", sn.global_batch}, {"sets", sn.sets}};
  print_plan(o, std::move(j), std::move(table), sn.toml, std::move(runnable), l.unexpressible);
}

// ---- PipeDream ----
int run_pipedream(const PlanOptions& o, const Config& cfg, const Chain& ch, const plan::Cluster& cl, int mb) {
  BATON_REQUIRE(cl.homogeneous(),
                fmt::format("PipeDream's DP assumes identical workers; cluster '{}' mixes device types "
                            "or node sizes",
                            cl.name),
                "use --algorithm hetpipe for mixed clusters");
  const int N = cl.total_gpus(), gpn = cl.gpus_per_node();
  std::vector<plan::PdLevel> levels;
  if (cl.nodes.size() == 1) {
    levels.push_back({N, cl.nodes[0].intra_gbs * 1e9});
  } else {
    BATON_REQUIRE(N % gpn == 0, fmt::format("PipeDream's topology levels need whole nodes: {} GPUs, {} per node", N, gpn),
                  fmt::format("use --gpus {} or {}", N / gpn * gpn, (N / gpn + 1) * gpn));
    levels.push_back({gpn, cl.nodes[0].intra_gbs * 1e9});
    levels.push_back({static_cast<int>(cl.nodes.size()), cl.nodes[0].inter_gbs * 1e9});
  }
  const auto& dev = cl.nodes[0].device;
  std::vector<plan::PdLayer> layers;
  for (int l = 0; l < ch.md.size(); ++l)
    layers.push_back({ch.fb(l, dev), ch.md.layers[l].out_bytes, ch.md.layers[l].params * ch.A.grad_bytes});
  const plan::PdPlan p = plan::pipedream_partition(layers, levels);
  std::vector<std::string> reps;
  json stages = json::array();
  std::string rows;
  for (size_t s = 0; s < p.stages.size(); ++s) {
    const auto& st = p.stages[s];
    double t = 0;
    for (int l = st.first; l <= st.last; ++l) t += layers[l].time;
    reps.push_back(std::to_string(st.replicas));
    stages.push_back({{"first", st.first}, {"last", st.last}, {"first_name", ch.name(st.first)},
                      {"last_name", ch.name(st.last)}, {"layers", st.last - st.first + 1},
                      {"replicas", st.replicas}, {"compute_s", t}});
    rows += fmt::format("{:>5} {:>5}..{:<5} {:<14} {:<14} {:>8} {:>12.3f}\n", s, st.first, st.last,
                        ch.name(st.first), ch.name(st.last), st.replicas, t * 1e3);
  }
  const std::string config = fmt::format("{}", fmt::join(reps, "-"));
  json j = {{"algorithm", "pipedream"}, {"cluster", cl.name}, {"gpus", N}, {"workers", p.workers},
            {"stages", stages}, {"config", config}, {"noam", p.noam}, {"slowest_s", p.slowest},
            {"samples_per_s", mb / p.slowest}};
  std::string table = fmt::format(
      "plan (pipedream): {} on {} x {} ({})\n"
      "stages: {} ({}), NOAM {} | slowest stage {:.3f} ms per minibatch -> {:.1f} samples/s\n"
      "{:>5} {:>12} {:<14} {:<14} {:>8} {:>12}\n{}",
      ch.label, N, dev.name, cl.name, p.stages.size(), config, p.noam, p.slowest * 1e3, mb / p.slowest,
      "stage", "layers", "first", "last", "replicas", "f+b ms", rows);
  emit(o, cfg, ch, j, table, pipedream_layout(p),
       fmt::format("baton plan --algorithm pipedream: {} on {} x {} ({}): {}, NOAM {}", ch.label, N, dev.name,
                   cl.name, config, p.noam));
  return 0;
}

// ---- HetPipe ----
int run_hetpipe(const PlanOptions& o, const Config& cfg, const Chain& ch, const plan::Cluster& cl, int mb) {
  const std::string policy = o.policy.empty() ? "hd" : o.policy;
  BATON_REQUIRE(policy == "np" || policy == "ed" || policy == "hd",
                fmt::format("unknown --policy '{}'", policy), "use np, ed or hd (HetPipe §8.1, Table 3)");
  const HetpipePlan hp = plan_hetpipe(ch, cl, policy, o.vw_size, o.nm,
                                      {.nm_bound = nm_search_bound(cfg.train.steps),
                                       .gpu_memory_bytes = o.gpu_memory_gb * 1e9});
  const int k = hp.k, nm = hp.nm;
  json jv = json::array();
  std::string out = fmt::format(
      "plan (hetpipe, policy {}): {} on {} GPUs ({}) | {} virtual workers of {} GPUs, Nm = {} ({})\n", policy,
      ch.label, cl.total_gpus(), cl.name, hp.vws.size(), k, nm,
      hp.nm_given       ? "--nm"
      : hp.memory_binds ? fmt::format("the smallest Max_m, searched up to {}", hp.nm_bound)
                        : fmt::format("memory allows the search bound {}: the best predicted throughput", hp.nm_bound));
  out += fmt::format("memory: what the trainer allocates on each GPU at Nm = {} (weights, gradients, {} optimizer "
                     "state{}, the weight versions stashed, the activation slots; pipeline/stage_memory.h), "
                     "against {}\n",
                     nm, ch.optimizer_states, ch.optimizer_states == 1 ? "" : "s",
                     o.gpu_memory_gb > 0 ? fmt::format("--gpu-memory-gb {:g}", o.gpu_memory_gb)
                                         : fmt::format("each device's memory less {:g} GB", ch.A.overhead_gb));
  // HD pairs the nodes by a speed ranking (plan/hetpipe.h hetpipe_node_speed): say which.
  const std::string speed_source = cl.measured_speeds() ? "relative_speed" : "peak_fp32";
  if (policy == "hd") {
    const std::vector<double> speed = plan::hetpipe_node_speed(cl);
    std::vector<int> order(cl.nodes.size());
    for (size_t n = 0; n < order.size(); ++n) order[n] = static_cast<int>(n);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return speed[a] > speed[b]; });
    std::vector<std::string> ranked;
    for (int n : order) {
      const std::string e = fmt::format("{} {:g}", cl.nodes[n].name, speed[n]);
      if (std::find(ranked.begin(), ranked.end(), e) == ranked.end()) ranked.push_back(e);
    }
    if (ranked.size() > 8) ranked.resize(8), ranked.push_back("...");
    out += fmt::format("HD pairs the fastest node with the slowest by {}: {}\n",
                       cl.measured_speeds() ? "the cluster file's relative_speed"
                                            : "data-sheet fp32 peak, TFLOP/s (no relative_speed in the cluster file)",
                       fmt::join(ranked, " > "));
  }
  for (size_t v = 0; v < hp.vws.size(); ++v) {
    const HetpipeVw& w = hp.vws[v];
    const plan::HpPlan& p = w.plan;
    json parts = json::array();
    if (!p.feasible) {
      out += fmt::format("VW {} {}: no partition fits in memory at Nm = {} (Max_m {})\n", v, w.label, nm, w.max_m);
      jv.push_back({{"label", w.label}, {"feasible", false}, {"max_m", w.max_m}, {"partitions", parts}});
      continue;
    }
    out += fmt::format(
        "VW {} {}: Max_m {} | slowest partition {:.3f} ms per minibatch -> {:.2f} minibatches/s, {:.1f} samples/s\n",
        v, w.label, w.max_m, p.slowest * 1e3, w.minibatches_per_s, mb * w.minibatches_per_s);
    out += fmt::format("  {:>3} {:<6} {:<14} {:>12} {:<14} {:<14} {:>10} {:>10} {:>5} {:>8}\n", "gpu", "node",
                       "device", "layers", "first", "last", "time ms", "mem GB", "slots", "versions");
    for (size_t q = 0; q < w.vw.node.size(); ++q) {
      const int first = p.first_layer[q];
      const int last = (q + 1 < w.vw.node.size() ? p.first_layer[q + 1] : ch.md.size()) - 1;
      const auto& node = cl.nodes[w.vw.node[q]];
      const pipeline::StageMemory& m = p.stage_memory[q];
      const pipeline::StageCounts counts = pipeline::hetpipe_stage_counts(k, nm, static_cast<int>(q));
      parts.push_back({{"gpu", q}, {"node", node.name}, {"device", node.device.name},
                       {"first", first}, {"last", last}, {"first_name", ch.name(first)},
                       {"last_name", ch.name(last)}, {"time_s", p.stage_time[q]},
                       {"memory_gb", double(m.total()) / 1e9}, {"memory_bytes", m.total()},
                       {"memory", {{"weights", m.weights}, {"gradients", m.gradients}, {"optimizer", m.optimizer},
                                   {"weight_versions", m.versions}, {"activations", m.activations}}},
                       {"slots", counts.slots}, {"weight_versions", counts.weight_versions},
                       {"capacity_gb", w.problem.gpus[q].memory_bytes / 1e9}});
      out += fmt::format("  {:>3} {:<6} {:<14} {:>5}..{:<5} {:<14} {:<14} {:>10.3f} {:>10.3f} {:>5} {:>8}\n", q,
                         node.name, node.device.name, first, last, ch.name(first), ch.name(last),
                         p.stage_time[q] * 1e3, double(m.total()) / 1e9, counts.slots, counts.weight_versions);
    }
    jv.push_back({{"label", w.label}, {"feasible", true}, {"max_m", w.max_m}, {"slowest_s", p.slowest},
                  {"minibatches_per_s", w.minibatches_per_s}, {"samples_per_s", mb * w.minibatches_per_s},
                  {"partitions", parts}});
  }
  BATON_REQUIRE(hp.feasible() > 0,
                fmt::format("no virtual worker of {} on '{}' fits in memory at Nm = {}", ch.label,
                            cl.name, nm),
                "lower --nm, train.micro_batch or the image size");
  const double total = hp.minibatches_per_s(), sum = hp.unsynchronised_minibatches_per_s();
  out += fmt::format(
      "total: {:.2f} minibatches/s, {:.1f} samples/s over {} virtual workers (WSP: each at the slowest one's pace; "
      "pushes, pulls and waiting not counted; each at its own pace: {:.1f} samples/s)\n",
      total, mb * total, hp.feasible(), mb * sum);
  if (!hp.nm_given && hp.best_nm != nm)
    out += fmt::format("best predicted Nm <= Max_m: {} ({:.1f} samples/s; --nm {}, or hetero.nm = {})\n", hp.best_nm,
                       mb * hp.best_minibatches_per_s, hp.best_nm, hp.best_nm);
  json j = {{"algorithm", "hetpipe"}, {"cluster", cl.name}, {"policy", policy}, {"speed_ranking", speed_source},
            {"vw_size", k},
            {"nm", nm}, {"nm_bound", hp.nm_bound}, {"memory_binds", hp.memory_binds}, {"best_nm", hp.best_nm},
            {"best_samples_per_s", mb * hp.best_minibatches_per_s}, {"virtual_workers", jv},
            {"minibatches_per_s", total}, {"samples_per_s", mb * total},
            {"unsynchronised_samples_per_s", mb * sum}};
  const HeteroSnippet sn = make_hetero_snippet(
      o.config, o.overrides, cfg, ch.md.size(), hetero_layout(hp, ch, cl),
      fmt::format("baton plan --algorithm hetpipe --policy {}: {} on {} GPUs ({}), {} virtual workers of {} GPUs, "
                  "Nm = {}",
                  policy, ch.label, cl.total_gpus(), cl.name, hp.vws.size(), k, nm));
  const HeteroLayout& l = sn.layout;
  json runnable = {{"exact", l.unexpressible.empty()}, {"unexpressible", l.unexpressible}, {"notes", l.notes},
                   {"ranks", sn.ranks}, {"sync", "wsp"}, {"nm", l.nm}, {"virtual_workers", l.virtual_workers},
                   {"global_batch", sn.global_batch}, {"steps", sn.steps}, {"sets", sn.sets}};
  print_plan(o, std::move(j), std::move(out), sn.toml, std::move(runnable), l.unexpressible);
  return 0;
}

// ---- MadPipe ----
int run_madpipe(const PlanOptions& o, const Config& cfg, const Chain& ch, const plan::Cluster& cl, int mb) {
  bool same_device = true;
  for (const auto& n : cl.nodes) same_device = same_device && n.device.name == cl.nodes[0].device.name;
  BATON_REQUIRE(same_device,
                fmt::format("MadPipe assumes P identical GPUs; cluster '{}' mixes device types", cl.name),
                "use --algorithm hetpipe for mixed clusters");
  const auto& dev = cl.nodes[0].device;
  plan::MpProblem pb;
  pb.P = cl.total_gpus();
  pb.memory = usable_bytes(dev, ch.A);
  // Every pair of GPUs at one bandwidth β (§C.1): the node bus inside one node, else a GPU's share
  // of the node's network bandwidth.
  pb.beta = cl.nodes.size() == 1 ? cl.nodes[0].intra_gbs * 1e9 : cl.nodes[0].inter_gbs * 1e9 / cl.nodes[0].gpus;
  pb.input_bytes = ch.md.input_bytes;
  for (int l = 0; l < ch.md.size(); ++l)
    pb.layers.push_back({ch.fb(l, dev), ch.weight_bytes(l), ch.md.layers[l].out_bytes});
  const plan::MpPlan plan = plan::madpipe_search(pb);
  BATON_REQUIRE(plan.feasible,
                fmt::format("MadPipe finds no allocation of {} on {} x {} with {:.1f} GB each",
                            ch.label, pb.P, dev.name, pb.memory / 1e9),
                "use more GPUs, a smaller train.micro_batch or a smaller image size");
  const plan::MpCheck c = plan::madpipe_check(pb, plan);
  json stages = json::array();
  std::string rows;
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    const auto& st = plan.stages[s];
    const int first = st.first - 1, last = st.last - 1;  // 0-based layer indices
    const double u = pb.layers.empty() ? 0 : [&] {
      double x = 0;
      for (int l = first; l <= last; ++l) x += pb.layers[l].u;
      return x;
    }();
    stages.push_back({{"first", first}, {"last", last}, {"first_name", ch.name(first)},
                      {"last_name", ch.name(last)}, {"gpu", c.gpu_of_stage[s]}, {"special", st.special},
                      {"activations", c.activations[s]}, {"load_s", u},
                      {"memory_gb", c.stage_memory[s] / 1e9}});
    rows += fmt::format("{:>5} {:>5}..{:<5} {:<14} {:<14} {:>4}{:<1} {:>6} {:>10.3f} {:>10.2f}\n", s, first,
                        last, ch.name(first), ch.name(last), c.gpu_of_stage[s], st.special ? "*" : "",
                        c.activations[s], u * 1e3, c.stage_memory[s] / 1e9);
  }
  std::vector<double> gpu_gb;
  for (double m : c.gpu_memory) gpu_gb.push_back(m / 1e9);
  json j = {{"algorithm", "madpipe"}, {"cluster", cl.name}, {"gpus", pb.P}, {"memory_limit_gb", pb.memory / 1e9},
            {"bandwidth_gbs", pb.beta / 1e9}, {"phase1_period_s", c.phase1_period}, {"period_s", c.period},
            {"simulated_period_s", c.simulated_period}, {"schedule_T_s", c.schedule_T},
            {"special_load_s", c.special_load}, {"fits", c.fits}, {"stages", stages},
            {"memory_gb", gpu_gb}, {"samples_per_s", mb / c.period}};
  std::string gpus;
  for (size_t g = 0; g < gpu_gb.size(); ++g) gpus += fmt::format(" {}:{:.2f}", g, gpu_gb[g]);
  std::string table = fmt::format(
      "plan (madpipe): {} on {} x {} ({}), M = {:.1f} GB, beta = {:.2f} GB/s\n"
      "period: phase 1 {:.3f} ms, checked with the simulated 1F1B* schedule {:.3f} ms (T = {:.3f} ms) "
      "-> {:.1f} samples/s{}\n"
      "{:>5} {:>12} {:<14} {:<14} {:>5} {:>6} {:>10} {:>10}\n{}"
      "memory per GPU (GB):{}{}\n",
      ch.label, pb.P, dev.name, cl.name, pb.memory / 1e9, pb.beta / 1e9, c.phase1_period * 1e3,
      c.period * 1e3, c.schedule_T * 1e3, mb / c.period,
      c.fits ? "" : " (does NOT fit in memory even at the sequential period)", "stage", "layers", "first",
      "last", "gpu", "acts", "U ms", "mem GB", rows, gpus, "   (* = the special GPU)");
  emit(o, cfg, ch, j, table, madpipe_layout(plan.stages, c.gpu_of_stage),
       fmt::format("baton plan --algorithm madpipe: {} on {} x {} ({}), period {:.3f} ms", ch.label, pb.P, dev.name,
                   cl.name, c.period * 1e3));
  return 0;
}

int run_partitioner(const PlanOptions& o, const Config& cfg, const plan::Cluster& cluster) {
  const Chain ch = make_chain(cfg, o.profile, cluster, "--algorithm " + o.algorithm);
  const int mb = cfg.train.micro_batch;
  if (o.algorithm == "pipedream") return run_pipedream(o, cfg, ch, cluster, mb);
  if (o.algorithm == "hetpipe") return run_hetpipe(o, cfg, ch, cluster, mb);
  return run_madpipe(o, cfg, ch, cluster, mb);
}

}  // namespace

int run_plan(const PlanOptions& o) {
  if (o.format != "table" && o.format != "json")
    throw Error(fmt::format("unknown --format '{}'", o.format), "use table or json");
  if (o.top_k < 1) throw Error(fmt::format("--top {} must be >= 1", o.top_k), "e.g. --top 5");
  const std::string& alg = o.algorithm;
  if (alg != "ptdp" && alg != "pipedream" && alg != "hetpipe" && alg != "madpipe")
    throw Error(fmt::format("unknown --algorithm '{}'", alg), "use ptdp, pipedream, hetpipe or madpipe");
  if (alg != "hetpipe" && (!o.policy.empty() || o.nm > 0 || o.vw_size > 0 || o.gpu_memory_gb != 0))
    throw Error(fmt::format("--policy, --nm, --vw-size and --gpu-memory-gb are HetPipe options, not {}'s", alg),
                "add --algorithm hetpipe, or drop them");
  if (o.gpu_memory_gb < 0)
    throw Error(fmt::format("--gpu-memory-gb {} is negative", o.gpu_memory_gb), "give the GB each GPU has, e.g. 8");
  if (alg != "ptdp" && o.evaluate)
    throw Error(fmt::format("--evaluate predicts the config's own PTD-P layout; it does not apply to {} partitions",
                            alg),
                fmt::format("drop --evaluate (--algorithm {} prints its partition as a runnable [parallel] snippet, "
                            "--output writes it), or use --algorithm ptdp",
                            alg));
  if (o.nm < 0 || o.vw_size < 0)
    throw Error("--nm and --vw-size must be positive", "e.g. --nm 4 --vw-size 4");
  const bool restricted = !o.schedules.empty() || !o.recompute.empty();
  if (restricted && (alg != "ptdp" || o.evaluate))
    throw Error(fmt::format("--schedules and --recompute restrict the PTD-P layout search, not {}",
                            o.evaluate ? "--evaluate (the config's own layout)" : alg + "'s partitions"),
                o.evaluate ? "drop them, or drop --evaluate to search"
                           : "drop them, or use --algorithm ptdp");
  plan::SearchOptions so;
  so.top_k = o.top_k;
  if (!o.schedules.empty()) so.schedules = plan::parse_schedule_list(o.schedules);
  if (!o.recompute.empty()) so.recompute = plan::parse_recompute_list(o.recompute);
  plan::Cluster cluster = plan::load_cluster(o.cluster);
  if (o.gpus > 0) cluster = cluster.first_gpus(o.gpus);
  const int N = cluster.total_gpus();

  // Validate the config for the world it will run on: the cluster's GPUs when evaluating its own
  // layout; when searching, the config's tp·pp alone (its layout is about to be replaced).
  std::vector<std::string> overrides = o.overrides;
  if (!o.evaluate)  // the search replaces the layout: validate the rest on one rank
    for (const char* kv : {"parallel.tp=1", "parallel.pp=1", "parallel.vp=1", "parallel.schedule=1f1b",
                           "parallel.stages=[]", "parallel.replicas=[]", "parallel.vertical_sync=false"})
      overrides.push_back(kv);
  const Config cfg = load_config(o.config, overrides, o.evaluate ? N : 1);
  if (alg != "ptdp") return run_partitioner(o, cfg, cluster);
  if (cfg.model.kind != ModelKind::GPT)
    throw Error(fmt::format("baton plan searches PTD-P layouts for GPT models; {} has model.kind = "
                            "\"{}\"", o.config, to_string(cfg.model.kind)),
                "partition CNNs with --algorithm pipedream, hetpipe or madpipe");
  if (cfg.model.vocab_size <= 0)
    throw Error(fmt::format("{}: model.vocab_size is 0 (taken from the tokenizer at train time)",
                            o.config),
                "the planner reads no tokenizer: set model.vocab_size (or --set model.vocab_size=V)");

  plan::PtdpProblem pb;
  pb.shape = {cfg.model.n_layer, cfg.model.n_head, cfg.model.d_model, cfg.model.seq_len,
              (cfg.model.vocab_size + 127) / 128 * 128};
  pb.global_batch = cfg.train.global_batch;
  pb.dtype = cfg.precision.compute;
  pb.act_layout = pb.dtype == "fp32" ? plan::ActLayout::BATON_FP32 : plan::ActLayout::MEGATRON;
  pb.cluster = cluster;
  if (!o.profile.empty()) {
    pb.profile = std::make_shared<plan::MeasuredProfile>(plan::load_profile(o.profile));
    plan::check_profile(*pb.profile, pb.shape, pb.dtype);
  }

  std::vector<plan::Prediction> cands;
  if (o.evaluate) {
    BATON_REQUIRE(cluster.homogeneous(),
                  fmt::format("cluster '{}' mixes device types or node sizes", cluster.name),
                  "--evaluate predicts PTD-P layouts on identical nodes; --algorithm hetpipe "
                  "partitions over mixed GPUs");
    cands.push_back(plan::evaluate(pb, layout_of(cfg), true));
  } else {
    so.sequence_parallel = cfg.parallel.sequence_parallel;
    so.zero1 = cfg.parallel.zero1;
    cands = plan::search(pb, so);
    if (cands.empty())
      throw Error(fmt::format("no layout of {} on {} GPUs of '{}' fits in memory", o.config, N,
                              cluster.name),
                  "use more GPUs, a smaller global_batch or a smaller model");
  }
  const std::string snippet = toml_snippet(cands[0], N);
  if (!o.output.empty()) {
    std::ofstream f(o.output);
    if (!(f << snippet))
      throw Error(fmt::format("cannot write {}", o.output), "check the directory exists");
  }

  if (o.format == "json") {
    nlohmann::json j;
    j["candidates"] = nlohmann::json::array();
    for (const auto& p : cands) {
      const auto& l = p.layout;
      j["candidates"].push_back({{"tp", l.tp},
                                 {"pp", l.pp},
                                 {"dp", l.dp},
                                 {"vp", l.vp},
                                 {"micro_batch", l.micro_batch},
                                 {"schedule", l.schedule},
                                 {"recompute", l.recompute},
                                 {"step_time_s", p.step_time_s},
                                 {"tokens_per_s", p.tokens_per_s},
                                 {"tflops_per_gpu", p.tflops_per_gpu},
                                 {"hw_tflops_per_gpu", p.hw_tflops_per_gpu},
                                 {"bubble_fraction", p.bubble_fraction},
                                 {"memory_gb", p.memory_gb},
                                 {"fits", p.fits},
                                 {"simulated", p.simulated},
                                 {"compute_s", p.compute_s}});
    }
    j["gpus"] = N;
    j["cluster"] = cluster.name;
    if (!o.evaluate) j["searched"] = {{"schedules", so.schedules}, {"recompute", so.recompute}};
    j["toml"] = snippet;
    j["profile"] = o.profile;
    std::puts(j.dump(2).c_str());
    return 0;
  }

  if (pb.profile)
    fmt::print("profile: measured per-layer times from {} ({}, micro-batch {}), scaled per layout "
               "(docs/planner.md)\n",
               pb.profile->source, pb.profile->device, pb.profile->micro_batch);
  fmt::print("plan: GPT {} layers, d_model {}, {} heads, seq {}, vocab {} | global batch {} | {} x "
             "{} ({})\n",
             pb.shape.n_layer, pb.shape.d_model, pb.shape.n_head, pb.shape.seq_len, pb.shape.vocab,
             pb.global_batch, N, cluster.nodes[0].device.name, cluster.name);
  if (!o.evaluate)
    fmt::print("searched: schedules {} | recompute {}\n", fmt::join(so.schedules, ","),
               fmt::join(so.recompute, ","));
  fmt::print("{:>2} {:>3} {:>3} {:>4} {:>2} {:>3} {:<11} {:<9} {:>9} {:>11} {:>8} {:>8} {:>6} {:>10}\n",
             "#", "tp", "pp", "dp", "vp", "mb", "schedule", "recompute", "step s", "tokens/s",
             "TFLOP/s", "HW TF/s", "bubble", "mem GB max");
  for (size_t i = 0; i < cands.size(); ++i) {
    const auto& p = cands[i];
    const auto& l = p.layout;
    fmt::print("{:>2} {:>3} {:>3} {:>4} {:>2} {:>3} {:<11} {:<9} {:>9.4f} {:>11.0f} {:>8.1f} {:>8.1f} "
               "{:>6.3f} {:>10.1f}{}\n",
               i + 1, l.tp, l.pp, l.dp, l.vp, l.micro_batch, l.schedule, l.recompute, p.step_time_s,
               p.tokens_per_s, p.tflops_per_gpu, p.hw_tflops_per_gpu, p.bubble_fraction,
               *std::max_element(p.memory_gb.begin(), p.memory_gb.end()),
               p.fits ? "" : fmt::format("  (exceeds {} GB)", cluster.nodes[0].device.memory_gb));
  }
  fmt::print("\nbest layout as config{}:\n{}", o.output.empty() ? "" : " (written to " + o.output + ")",
             snippet);
  return 0;
}

}  // namespace baton::app
