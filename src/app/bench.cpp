// `baton bench CONFIG [--set k=v]... [--warmup N] [--steps N]` (DESIGN §8): the training session
// of CONFIG — same layout, model, optimizer and pipeline schedule as `baton train` — on uniform
// random token ids from train.seed (a CNN: random images and labels of the model's shape,
// data.synthetic), so no dataset or tokenizer is needed (the vocabulary is model.vocab_size, else
// data.tokenizer's). Runs N warm-up steps, then N timed steps; writes no
// checkpoints, metrics or config and evaluates nothing. Rank 0 prints: tokens/s (images/s), model
// TFLOP/s per device (PTD-P formula; a CNN's convolution and linear FLOPs), MFU when the device's peak is known, median and min step time (a step
// lasts as long as its slowest rank) and, with several ranks, the share of time blocked in
// communication. `--json FILE` writes the same figures unrounded for scripts (launch/gpu-bench.sh).
#include <algorithm>
#include <fstream>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/app.h"
#include "backend/op_timed_backend.h"
#include "config/config.h"
#include "config/virtual_workers.h"
#include "core/error.h"
#include "core/log.h"
#include "data/tokenizer.h"
#include "dist/comm.h"
#include "model/gpt.h"
#include "optim/lr_schedule.h"
#include "train/loop/image_batches.h"
#include "train/loop/session.h"
#include "train/loop/trainer.h"
#include "train/observe/divergence_guard.h"

namespace baton::app {
namespace {

std::string human_rate(double x) {
  if (x >= 1e6) return fmt::format("{:.2f}M", x / 1e6);
  if (x >= 1e3) return fmt::format("{:.2f}k", x / 1e3);
  return x >= 10 ? fmt::format("{:.0f}", x) : fmt::format("{:.2f}", x);
}

int bench(Config cfg, dist::Comm& world, const BenchOptions& opts) {
  BATON_REQUIRE(!trains_virtual_workers(cfg.hetero),
                fmt::format("baton bench does not run {} virtual workers yet",
                            cfg.hetero.sync == SyncMode::WSP ? "WSP" : "allreduce (hetero.sync = \"allreduce\")"),
                "bench the same model without [hetero] (data parallelism); `baton train` runs hetero.sync = "
                "\"wsp\" and \"allreduce\" and logs each virtual worker's minibatch time and waiting");
  // The session sees a run of exactly the benchmarked steps (an asynchronous pipeline drains at
  // its end) and never a checkpoint.
  cfg.train.steps = opts.warmup + opts.steps;
  cfg.checkpoint.every = 0;
  int tokenizer_vocab = 0;
  if (cfg.model.vocab_size == 0 && !cfg.data.tokenizer.empty())
    tokenizer_vocab = load_tokenizer(cfg.data)->vocab_size();
  // The model first: a config without a vocabulary fails before any collective.
  std::shared_ptr<const ModelBuilder> builder = model_builder(cfg, tokenizer_vocab);
  const bool images = builder->input_kind() == InputKind::IMAGES;
  std::unique_ptr<BatchSource> data;
  if (images) {  // the model's shape of random images and labels (data.synthetic)
    cfg.data = DataConfig{};
    cfg.data.synthetic = true;
    data = make_image_batches(cfg);
  } else {
    const GptDims dims = gpt_dims_of(*builder);
    data = std::make_unique<SyntheticTokens>(dims.vocab, dims.seq_len, cfg.train.seed);
  }
  const std::string unit = images ? "images" : "tokens";
  const std::string formula = images ? "the layers' convolution and linear FLOPs" : "the PTD-P formula";
  SessionOptions session_options;
  session_options.op_times = op_times_requested();
  TrainSession session(cfg, world, std::move(builder), std::move(data), session_options);
  session.log_header();
  const LrSchedule sched = lr_schedule(cfg.optim, cfg.train.steps);
  std::vector<double> seconds, comm;
  double first_loss = 0, last_loss = 0;
  // The training run's divergence guard over the benchmarked steps: a config whose defaults would
  // stop its own training is seen here (it does not stop the benchmark).
  DivergenceGuard guard(divergence_rules(cfg, session.builder()));
  std::optional<std::string> flagged;
  if (session.op_times() && opts.warmup == 0) session.op_times()->reset();
  for (int64_t step = 0; step < cfg.train.steps; ++step) {
    const TimedStep t = session.step(step, sched.at(step));
    // BATON_OP_TIMES=1: the table covers the timed steps only.
    if (session.op_times() && step + 1 == opts.warmup) session.op_times()->reset();
    if (!flagged) flagged = guard.check(step + 1, t.result.loss, t.result.grad_norm);
    if (step == 0) first_loss = t.result.loss;
    last_loss = t.result.loss;
    if (step < opts.warmup) continue;
    seconds.push_back(t.seconds);
    comm.push_back(t.comm_seconds);
  }

  session.write_trace();  // run.trace: <run.dir>/trace.json of the warm-up and timed steps
  // A step of the job lasts as long as its slowest rank.
  const int ranks = session.world_size();
  const double total_local = [&] { double s = 0; for (double x : seconds) s += x; return s; }();
  const double comm_local = [&] { double s = 0; for (double x : comm) s += x; return s; }();
  double comm_share_mean = comm_local / total_local, comm_share_max = comm_share_mean;
  if (ranks > 1) {
    world.all_reduce(seconds.data(), seconds.size(), dist::DType::F64, dist::ReduceOp::MAX);
    comm_share_mean = world.all_reduce_scalar(comm_local / total_local) / ranks;
    comm_share_max = world.all_reduce_scalar(comm_local / total_local, dist::ReduceOp::MAX);
  }
  double total = 0;
  for (double x : seconds) total += x;
  std::vector<double> sorted = seconds;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  const double median = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  const double tokens_per_s = double(session.tokens_per_step()) * n / total;
  const double tflops_job = session.flops_per_step() * n / total / 1e12;
  const double tflops_device = tflops_job / ranks;
  const double peak = session.peak_tflops();
  // llm.c's and most papers' count (6N + 6·L·C·T per token), beside the DESIGN formula above.
  const double flops_6n = session.builder().flops_per_token_6n();
  const double tflops_6n_device = flops_6n * tokens_per_s / 1e12 / ranks;

  log::info("bench: {} warm-up + {} timed steps on synthetic {} | {} {}/step | loss {:.4f} -> {:.4f}",
            opts.warmup, opts.steps, unit, session.tokens_per_step(), unit, first_loss, last_loss);
  log::info("divergence guard (train.spike_*, as a training run would check): {}",
            flagged ? *flagged : std::string("no step flagged"));
  log::info("step time: median {:.1f} ms, min {:.1f} ms (over {} timed steps{})", 1e3 * median,
            1e3 * sorted.front(), n, ranks > 1 ? ", slowest rank per step" : "");
  log::info("throughput: {} {}/s | {:.3f} TFLOP/s per device ({} device{}, {:.3f} TFLOP/s in all; "
            "model FLOPs by {})",
            human_rate(tokens_per_s), unit, tflops_device, ranks, ranks > 1 ? "s" : "", tflops_job, formula);
  // The peak of the run's compute dtype (core/device_table.h: fp32 is the plain, non-TF32 rate).
  if (peak > 0)
    log::info("mfu: {:.1f}% of the {:.0f} TFLOP/s dense {} peak of {}", 100 * tflops_device / peak, peak,
              cfg.precision.compute, session.device().device_name);
  else
    log::info("mfu: not reported: the {} peak of {} is unknown (measured {:.3f} TFLOP/s per device)",
              cfg.precision.compute, session.device().device_name, tflops_device);
  if (flops_6n > 0 && peak > 0)
    log::info("mfu (6N + 6·L·C·T per token, as llm.c and PaLM count; causal attention once): {:.1f}% "
              "({:.3f} TFLOP/s per device)", 100 * tflops_6n_device / peak, tflops_6n_device);
  if (ranks > 1)
    log::info("comm: {:.1f}% of step time blocked in communication (mean over {} ranks; max {:.1f}%)",
              100 * comm_share_mean, ranks, 100 * comm_share_max);
  if (const std::string k = session.backend().kernel_summary(); !k.empty()) log::info("{}", k);
  std::vector<OpTimedBackend::Row> op_rows;
  if (session.op_times()) {
    op_rows = session.op_times()->rows();
    log::info("op times (BATON_OP_TIMES=1; rank {}'s backend ops over its {} timed steps, {} clock):\n{}",
              world.rank(), n, session.device().device == "cuda" ? "CUDA event" : "wall",
              OpTimedBackend::table(op_rows, 1e3 * total_local, static_cast<int>(n)));
  }
  if (!opts.json.empty() && world.rank() == 0) {
    nlohmann::json j;
    j["config"] = opts.config;
    j["device"] = session.device().device_name;
    j["compute"] = cfg.precision.compute;
    j["attention"] = cfg.precision.attention;
    j["ranks"] = ranks;
    j["layout"] = {{"tp", cfg.parallel.tp}, {"pp", cfg.parallel.pp}, {"dp", cfg.dp}};
    j["micro_batch"] = cfg.train.micro_batch;
    j["global_batch"] = cfg.train.global_batch;
    if (images) {
      j["image_size"] = cfg.model.image_size;
      j["images_per_step"] = session.tokens_per_step();
      j["images_per_s"] = tokens_per_s;
    } else {
      j["seq_len"] = cfg.model.seq_len;
    }
    j["warmup_steps"] = opts.warmup;
    j["timed_steps"] = n;
    j["tokens_per_step"] = session.tokens_per_step();  // images for a CNN (one position each)
    j["flops_per_step"] = session.flops_per_step();
    j["step_ms_median"] = 1e3 * median;
    j["step_ms_min"] = 1e3 * sorted.front();
    j["tokens_per_s"] = tokens_per_s;
    j["tflops_per_device"] = tflops_device;
    j["peak_tflops"] = peak > 0 ? nlohmann::json(peak) : nlohmann::json(nullptr);
    j["mfu"] = peak > 0 ? nlohmann::json(tflops_device / peak) : nlohmann::json(nullptr);
    j["flops_per_token_6n"] = flops_6n > 0 ? nlohmann::json(flops_6n) : nlohmann::json(nullptr);
    j["mfu_6n"] = flops_6n > 0 && peak > 0 ? nlohmann::json(tflops_6n_device / peak) : nlohmann::json(nullptr);
    j["comm_share_mean"] = comm_share_mean;
    j["loss_first"] = first_loss;
    j["loss_last"] = last_loss;
    j["guard_flagged"] = flagged ? nlohmann::json(*flagged) : nlohmann::json(nullptr);
    if (const std::string k = session.backend().kernel_summary(); !k.empty()) j["kernel_summary"] = k;
    if (session.op_times()) {  // per timed step
      nlohmann::json ops = nlohmann::json::array();
      for (const OpTimedBackend::Row& r : op_rows)
        ops.push_back({{"op", r.op}, {"calls", double(r.calls) / n}, {"ms", r.ms / n}, {"flops", r.flops / n},
                       {"bytes", r.bytes / n}});
      j["op_times"] = ops;
    }
    std::ofstream out(opts.json);
    BATON_REQUIRE(out.good(), fmt::format("cannot write {}", opts.json),
                  "check that the directory exists and is writable");
    out << j.dump(2) << "\n";
  }
  return 0;
}

}  // namespace

int run_bench(const BenchOptions& opts) {
  BATON_REQUIRE(opts.warmup >= 0 && opts.steps >= 1,
                fmt::format("--warmup {} --steps {}: need warm-up >= 0 and at least one timed step",
                            opts.warmup, opts.steps),
                "e.g. --warmup 3 --steps 10");
  return run_with_config(opts.config, opts.overrides, false,
                         [&](const Config& cfg, dist::Comm& world) { return bench(cfg, world, opts); });
}

}  // namespace baton::app
