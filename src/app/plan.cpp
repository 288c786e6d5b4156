// `baton plan CONFIG --cluster FILE [--gpus N] [--top K] [--evaluate] [--format table|json]
// [--output FILE]`: the PTD-P layout search (src/plan/ptdp.h) for the config's GPT on a cluster
// file, or, with --evaluate, the prediction for the layout the config already has. Prints the
// candidates and the best one as a TOML snippet that `baton train` accepts (also written to
// --output). Assumptions are in docs/planner.md.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "app/app.h"
#include "config/config.h"
#include "core/error.h"
#include "plan/cluster.h"
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

}  // namespace

int run_plan(const PlanOptions& o) {
  if (o.format != "table" && o.format != "json")
    throw Error(fmt::format("unknown --format '{}'", o.format), "use table or json");
  if (o.top_k < 1) throw Error(fmt::format("--top {} must be >= 1", o.top_k), "e.g. --top 5");
  plan::Cluster cluster = plan::load_cluster(o.cluster);
  if (o.gpus > 0) cluster = cluster.first_gpus(o.gpus);
  const int N = cluster.total_gpus();

  // Validate the config for the world it will run on: the cluster's GPUs when evaluating its own
  // layout; when searching, the config's tp·pp alone (its layout is about to be replaced).
  std::vector<std::string> overrides = o.overrides;
  if (!o.evaluate)  // the search replaces the layout: validate the rest on one rank
    for (const char* kv : {"parallel.tp=1", "parallel.pp=1", "parallel.vp=1", "parallel.schedule=1f1b"})
      overrides.push_back(kv);
  const Config cfg = load_config(o.config, overrides, o.evaluate ? N : 1);
  if (cfg.model.kind != "gpt")
    throw Error(fmt::format("baton plan searches PTD-P layouts for GPT models; {} has model.kind = "
                            "\"{}\"", o.config, cfg.model.kind),
                "CNN partitioning (PipeDream, HetPipe, MadPipe) is a library API today, see "
                "docs/planner.md");
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

  std::vector<plan::Prediction> cands;
  if (o.evaluate) {
    BATON_REQUIRE(cluster.homogeneous(),
                  fmt::format("cluster '{}' mixes device types or node sizes", cluster.name),
                  "--evaluate predicts PTD-P layouts on identical nodes");
    cands.push_back(plan::evaluate(pb, layout_of(cfg), true));
  } else {
    plan::SearchOptions so;
    so.top_k = o.top_k;
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
                                 {"simulated", p.simulated}});
    }
    j["gpus"] = N;
    j["cluster"] = cluster.name;
    j["toml"] = snippet;
    std::puts(j.dump(2).c_str());
    return 0;
  }

  fmt::print("plan: GPT {} layers, d_model {}, {} heads, seq {}, vocab {} | global batch {} | {} x "
             "{} ({})\n",
             pb.shape.n_layer, pb.shape.d_model, pb.shape.n_head, pb.shape.seq_len, pb.shape.vocab,
             pb.global_batch, N, cluster.nodes[0].device.name, cluster.name);
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
