#include "train/trainer.h"

#include <algorithm>
#include <numeric>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "backend/device.h"
#include "core/build_info.h"
#include "core/error.h"
#include "core/log.h"
#include "core/stop_signal.h"
#include "core/timer.h"
#include "data/indexed_dataset.h"
#include "data/token_loader.h"
#include "data/tokenizer.h"
#include "model/gpt_model.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "train/metrics.h"
#include "train/sampler.h"
#include "dist/mpi_comm.h"
#include "dist/rank_grid.h"
#include "train/checkpoint_resume.h"
#include "train/checkpoint_state.h"
#include "train/pipeline_step.h"
#include "train/train_step.h"

namespace baton {
namespace {

std::string human_count(double x) {
  if (x >= 1e9) return fmt::format("{:.2f}G", x / 1e9);
  if (x >= 1e6) return fmt::format("{:.2f}M", x / 1e6);
  if (x >= 1e3) return fmt::format("{:.1f}k", x / 1e3);
  return fmt::format("{:.0f}", x);
}

std::string human_duration(double s) {
  const int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02d}m", t / 3600, (t / 60) % 60);
  if (t >= 60) return fmt::format("{}m{:02d}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

std::unique_ptr<IndexedDataset> open_dataset(const std::string& prefix, int vocab,
                                             const std::string& vocab_source) {
  auto ds = IndexedDataset::open(prefix);
  check_tokenizer_matches(*ds, vocab, vocab_source);
  return ds;
}

// Entropy (nats) of the unigram distribution of the first `limit` tokens: the loss of a model that
// learned token frequencies and nothing else, the baseline a trained model must beat.
double unigram_entropy(const IndexedDataset& ds, int vocab, int64_t limit = int64_t(1) << 24) {
  const int64_t n = std::min(ds.num_tokens(), limit);
  std::vector<int64_t> counts(vocab, 0);
  std::vector<int32_t> chunk(1 << 16);
  for (int64_t pos = 0; pos < n; pos += static_cast<int64_t>(chunk.size())) {
    const int64_t k = std::min<int64_t>(static_cast<int64_t>(chunk.size()), n - pos);
    ds.read_tokens(pos, k, chunk.data());
    for (int64_t i = 0; i < k; ++i) counts[chunk[i]]++;
  }
  double h = 0;
  for (int64_t c : counts)
    if (c > 0) h -= (double(c) / n) * std::log(double(c) / n);
  return h;
}

// Mean loss over `batches` validation batches of `rows` sequences. Data-parallel rank d evaluates
// its slice of each batch; the sums meet in one all-reduce. Every tensor-parallel rank runs the
// forward (the model's collectives need all of them) and gets the same losses.
double evaluate(GptModel& model, const TokenLoader& loader, int batches, int rows, int micro,
                dist::Comm* dp) {
  const int T = loader.seq_len();
  const int dp_size = dp ? dp->size() : 1, dp_rank = dp ? dp->rank() : 0;
  const int mine = rows / dp_size;
  std::vector<int32_t> x(size_t(micro) * T), y(size_t(micro) * T);
  double sum = 0;
  for (int b = 0; b < batches; ++b) {
    for (int r = 0; r < mine; r += micro) {
      loader.eval_rows(b, rows, dp_rank * mine + r, micro, x.data(), y.data());
      sum += model.forward(0, x.data(), y.data(), micro, T, false, 0.0f);
    }
  }
  if (dp) sum = dp->all_reduce_scalar(sum);
  return sum / (double(batches) * rows * T);
}

// A resumed run appends to metrics.jsonl; lines of steps after the checkpoint (logged by the run
// that crashed before its next checkpoint) are dropped first, so each step appears once.
void truncate_metrics_after(const std::string& run_dir, int64_t step) {
  const std::string path = run_dir + "/metrics.jsonl";
  std::ifstream in(path);
  if (!in) return;
  std::string kept, line;
  bool dropped = false;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.contains("step") && j["step"].get<int64_t>() > step) {
      dropped = true;
      continue;
    }
    kept += line + "\n";
  }
  if (!dropped) return;
  const std::string tmp = path + ".tmp";
  std::ofstream(tmp, std::ios::trunc) << kept;
  std::filesystem::rename(tmp, path);
}

// Saves the training state and logs how long training was blocked by it.
std::string save_state(const Config& cfg, GptModel& model, AdamW& opt, HostTrainState& host,
                       int64_t step, double last_lr, const ShardLayout& layout) {
  const SaveResult r = save_train_state(cfg, model, opt, host, step, last_lr, layout);
  log::info("saved {} ({:.1f} MB) in {:.2f} s", std::filesystem::path(r.path).filename().string(),
            r.bytes / 1e6, r.seconds);
  return r.path;
}

}  // namespace

TrainSummary train(const Config& cfg, dist::Comm* world) {
  BATON_REQUIRE(cfg.model.kind == "gpt",
                fmt::format("model.kind = \"{}\" is not trainable yet", cfg.model.kind),
                "only GPT models train today; CNNs arrive with the HetPipe/CNN issue");
  BATON_REQUIRE(cfg.optim.kind == "adamw",
                fmt::format("optim.kind = \"{}\" is not implemented yet", cfg.optim.kind),
                "use optim.kind = \"adamw\"");
  BATON_REQUIRE(cfg.model.dropout == 0.0, "model.dropout > 0 is not implemented yet",
                "set model.dropout = 0");
  // bf16 mixed precision is the CUDA backend's next step (docs/cuda.md): refuse it rather than
  // silently computing in fp32.
  BATON_REQUIRE(cfg.precision.compute == "fp32",
                "precision.compute = \"bf16\" is not implemented yet (the CUDA backend computes in fp32)",
                "use compute = \"fp32\"");
  BATON_REQUIRE(!cfg.data.train.empty(), "data.train is not set",
                "set data.train to a dataset prefix built with `baton data build`");
  // PTD-P scatter/gather (notes-dissertation §3) splits what crosses a stage boundary over tp;
  // with sequence parallelism it is split already (Megatron disables scatter/gather there).
  BATON_REQUIRE(!cfg.parallel.scatter_gather ||
                    (cfg.parallel.pp > 1 && cfg.parallel.tp > 1 && !cfg.parallel.sequence_parallel),
                "parallel.scatter_gather = true needs pp > 1 and tp > 1 without sequence parallelism",
                "scatter/gather splits the activations sent between pipeline stages over the "
                "tensor-parallel ranks; under sequence parallelism they are split already: set "
                "parallel.scatter_gather = false");
  // The asynchronous schedules change the update rule (stale weights); with one stage there is no
  // pipeline to run them on, and silently training with the flush rule would be a lie.
  BATON_REQUIRE(!is_async_schedule(cfg.parallel.schedule) || cfg.parallel.pp > 1,
                fmt::format("parallel.schedule = \"{}\" needs parallel.pp > 1", cfg.parallel.schedule),
                "set parallel.pp > 1, or use a flush schedule (e.g. \"1f1b\") with pp = 1");
  const int world_size = world ? world->size() : 1;
  // pp_stages: pipeline stages; pp_size: ranks of a pipeline — their sum of replicas under
  // pipedream's replicated stages (1F1B-RR, parallel.replicas), else pp_stages.
  const std::vector<int>& replicas = cfg.parallel.replicas;
  const int tp_size = cfg.parallel.tp, dp_size = cfg.dp, pp_stages = cfg.parallel.pp;
  int pp_size = pp_stages;
  if (!replicas.empty()) pp_size = std::accumulate(replicas.begin(), replicas.end(), 0);
  const int vp = cfg.parallel.vp;
  // Megatron's split of the blocks over pp·vp model stages; the same error on every rank, before
  // any collective.
  pipeline_chunks(cfg.model.n_layer, pp_stages, vp, 0);
  BATON_REQUIRE(tp_size * dp_size * pp_size == world_size,
                fmt::format("layout tp={} x dp={} x pp={} does not match {} ranks", tp_size, dp_size,
                            pp_size, world_size),
                "launch tp*pp*dp ranks (dp comes from the world size; with parallel.replicas, pp "
                "counts every replica)");
  dist::ProcessGroups groups;
  if (world_size > 1) groups = dist::make_process_groups(*world, {tp_size, dp_size, pp_size});
  const bool rank0 = !world || world->rank() == 0;

  // ---- data ----
  std::unique_ptr<Tokenizer> tokenizer;
  if (!cfg.data.tokenizer.empty()) tokenizer = Tokenizer::load(cfg.data.tokenizer);
  const GptDims dims = gpt_dims(cfg.model, tokenizer ? tokenizer->vocab_size() : 0);
  BATON_REQUIRE(dims.vocab_padded % cfg.parallel.tp == 0,
                fmt::format("parallel.tp = {} does not divide the padded vocabulary ({} = {} rounded up "
                            "to a multiple of 128)", cfg.parallel.tp, dims.vocab_padded, dims.vocab),
                "use a power-of-two tp (the vocabulary is split evenly across tensor-parallel ranks)");
  const std::string vocab_source =
      cfg.model.vocab_size > 0 ? "model.vocab_size" : "tokenizer '" + cfg.data.tokenizer + "'";
  auto train_ds = open_dataset(cfg.data.train, dims.vocab, vocab_source);
  std::unique_ptr<IndexedDataset> valid_ds;
  if (!cfg.data.valid.empty()) valid_ds = open_dataset(cfg.data.valid, dims.vocab, vocab_source);
  const int T = cfg.model.seq_len;
  TokenLoader train_loader(*train_ds, T, cfg.train.seed);
  std::unique_ptr<TokenLoader> valid_loader;
  if (valid_ds) valid_loader = std::make_unique<TokenLoader>(*valid_ds, T, cfg.train.seed);

  // ---- model, optimizer ----
  BackendChoice choice = choose_backend(cfg.precision.device);
  Backend& be = *choice.backend;
  // The communicators are MPI over host memory; GPU buffers need the NCCL Comm, not wired yet.
  BATON_REQUIRE(choice.device == "cpu" || world_size == 1,
                fmt::format("{} ranks with precision.device = \"cuda\": multi-rank GPU training needs "
                            "the NCCL communicator, which is not wired into training yet", world_size),
                "run one process per job on the GPU, or precision.device = \"cpu\" for multi-rank runs");
  TensorParallel tpc;
  if (tp_size > 1)
    tpc = {.rank = groups.coord.tp, .size = tp_size,
           .sequence_parallel = cfg.parallel.sequence_parallel, .comm = groups.tp.get()};
  BATON_REQUIRE(!tpc.sp() || (cfg.train.micro_batch * T) % tp_size == 0,
                fmt::format("sequence parallelism needs micro_batch x seq_len ({}) divisible by tp = {}",
                            cfg.train.micro_batch * T, tp_size),
                "change train.micro_batch or model.seq_len, or turn sequence_parallel off");
  dist::Comm* dp_comm = dp_size > 1 ? groups.dp.get() : nullptr;
  GptModel model(dims, be, tpc, 16 * size_t(dp_size),
                 pipeline_chunks(dims.n_layer, pp_stages, vp, stage_of_rank(replicas, groups.coord.pp)),
                 parse_recompute(cfg.parallel.recompute));
  model.init_weights(cfg.train.seed);
  const int micro = cfg.train.micro_batch;
  const int accum = cfg.micro_batches_per_step();
  model.reserve(micro, T, 1);
  DataParallelGrads dpg(be, model.table(), model.layer_of_param(), dp_comm, cfg.parallel.zero1,
                        static_cast<size_t>(cfg.parallel.bucket_mb * 1048576.0), tpc.rank == 0);
  // The last pipeline stage's copy of the tied wte: counted in the norm on the first stage only,
  // written to checkpoints by the first stage only (both stages read it).
  const bool wte_copy = pp_stages > 1 && model.has_head() && !model.has_embedding();
  // 1F1B-RR: the replicas of a stage hold identical weights and optimizer state; replica 0 writes.
  const bool replica0 = replicas.empty() || !world ||
                        groups.coord.pp == stage_first_rank(replicas, stage_of_rank(replicas, groups.coord.pp));
  if (wte_copy) dpg.exclude_from_norm(model.table(), model.tied_wte_param());
  AdamW opt(be, dpg.segments(), dpg.state_size(), cfg.optim);
  HostTrainState host(model.table(), model.flat_size());  // host staging of params, m, v
  ShardLayout shard_layout{.tp_rank = tpc.rank, .tp_size = tpc.size,
                           .writes = (!world || groups.coord.dp == 0) && replica0,
                           .comm = world_size > 1 ? dynamic_cast<dist::MpiComm&>(*world).handle()
                                                  : MPI_COMM_NULL,
                           .dp = &dpg,
                           .tp = tp_size > 1 ? groups.tp.get() : nullptr,
                           .skip_tied_copy = wte_copy};
  const StepSetup setup{.model = &model, .optimizer = &opt, .grads = &dpg,
                        .tp = tp_size > 1 ? groups.tp.get() : nullptr, .dp = dp_comm,
                        .dp_rank = dp_size > 1 ? groups.coord.dp : 0,
                        .global_batch = cfg.train.global_batch, .micro_batch = micro,
                        .seq_len = T, .grad_clip = cfg.optim.grad_clip};
  const BatchRows batch = [&](int64_t step, int row, int n, int32_t* x, int32_t* y) {
    train_loader.train_rows(step, row, n, x, y);
  };
  // Pipeline parallelism: the flush schedule run by the executor (train/pipeline_step.h).
  std::unique_ptr<dist::Comm> embedding_group;
  std::unique_ptr<PipelineStep> pipe;
  if (pp_size > 1) {
    embedding_group = make_embedding_group(*groups.pp, replicas);
    pipe = std::make_unique<PipelineStep>(PipelineSetup{.step = setup, .pp = groups.pp.get(),
                                                        .embedding = embedding_group.get(),
                                                        .vp = vp, .schedule = cfg.parallel.schedule,
                                                        .scatter_gather = cfg.parallel.scatter_gather,
                                                        .vertical_sync = cfg.parallel.vertical_sync,
                                                        .replicas = replicas,
                                                        .total_steps = cfg.train.steps,
                                                        .drain_every = cfg.checkpoint.every});
  }
  // Asynchronous schedules (pipedream, 2bw) run without flushes between checkpoints; the pipeline
  // drains at checkpoint.every and at the end, where checkpoints are consistent.
  const bool async_pipe = pipe && is_async_schedule(cfg.parallel.schedule);
  LrSchedule sched{cfg.optim.lr, cfg.optim.min_lr, cfg.optim.warmup_steps, cfg.train.steps,
                   cfg.optim.decay};

  // ---- header ----
  const double flops = gpt_model_flops_per_step(cfg.train.global_batch, T, dims.n_layer,
                                                dims.d_model, dims.vocab_padded);
  const double peak = peak_tflops_for(choice.device_name);
  const int64_t tokens_per_step = int64_t(cfg.train.global_batch) * T;
  log::info("baton {} | device {} ({}) | {} rank{}: tp {} x dp {} x pp {}{}{}{}", build::version,
            choice.device, choice.device_name, world_size, world_size > 1 ? "s" : "", tp_size,
            dp_size, pp_size,
            replicas.empty() ? std::string()
                             : fmt::format(" ({} stages, replicas {})", pp_stages, fmt::join(replicas, ",")),
            tpc.sp() ? " | sequence parallel" : "", dpg.zero1() ? " | ZeRO-1" : "");
  if (pipe)
    log::info("pipeline: schedule {}{} | {} micro-batches per step | {} activation slots on this "
              "rank (the schedule's simulated peak{}) | {} blocks per model stage{}{}",
              cfg.parallel.schedule, vp > 1 ? fmt::format(", {} chunks per rank", vp) : std::string(),
              pipe->microbatches(), pipe->slots(), async_pipe ? " + 1 for evaluation" : "",
              dims.n_layer / (pp_stages * vp),
              cfg.parallel.scatter_gather ? " | scatter/gather" : "",
              async_pipe ? fmt::format(" | {}, drained every {}", cfg.parallel.schedule == "pipedream"
                                                                     ? replicas.empty() ? "one update per micro-batch"
                                                                     : "1F1B-RR: one update per round of a stage's replicas (their gradients summed)"
                                                                     : "one update per batch on W(t-1)",
                                       cfg.checkpoint.every > 0
                                           ? fmt::format("{} steps", cfg.checkpoint.every)
                                           : std::string("run (at its end)"))
                         : std::string());
  if (!choice.note.empty()) log::info("note: {}", choice.note);
  // Parameters of the whole model: each rank's tensor-parallel shards, replicated tensors on tp
  // rank 0, the tied wte once (first stage), summed over the job and divided by the replicas.
  double n_params = 0;
  for (int i = 0; i < model.table().size(); ++i)
    if ((model.table().spec(i).tp_dim >= 0 || tpc.rank == 0) && !(wte_copy && i == model.tied_wte_param()))
      n_params += static_cast<double>(model.table().numel(i));
  if (world_size > 1) n_params = world->all_reduce_scalar(n_params) / dp_size;
  log::info("model: GPT {} layers, d_model {}, {} heads, seq_len {}, vocab {} (padded {}) | {} parameters",
            dims.n_layer, dims.d_model, dims.n_head, T, dims.vocab, dims.vocab_padded,
            human_count(n_params));
  log::info("data: train {} ({} tokens){} | {} tokens/step = {} x {} micro-batches x {} seq",
            cfg.data.train, human_count(static_cast<double>(train_ds->num_tokens())),
            valid_ds ? fmt::format(", valid {} ({} tokens)", cfg.data.valid,
                                   human_count(static_cast<double>(valid_ds->num_tokens())))
                     : std::string(", no validation set"),
            tokens_per_step, accum * dp_size, micro, T);
  log::info("baseline: unigram entropy of the training tokens = {:.3f} nats (a model that learned "
            "only token frequencies scores this)", unigram_entropy(*train_ds, dims.vocab));
  log::info("memory per rank: params+grads {:.1f} MiB, adam {:.1f} MiB, activations {:.1f} MiB "
            "(peak: {} slot{}, recompute {})",
            2.0 * model.flat_size() * sizeof(float) / 1048576.0,
            2.0 * opt.state_size() * sizeof(float) / 1048576.0, model.activation_bytes() / 1048576.0,
            model.num_slots(), model.num_slots() > 1 ? "s" : "", cfg.parallel.recompute);
  log::info("flops: 72*B*s*l*h^2*(1 + s/6h + V/12lh) = {:.3g} per step; peak {}",
            flops, peak > 0 ? fmt::format("{:.0f} TFLOP/s (MFU reported)", peak)
                            : std::string("unknown for this device (MFU not reported)"));
  // ---- resume ----
  const std::string ckpt_dir = cfg.checkpoint_dir();
  const auto resumed = choose_resume_point(cfg.checkpoint, ckpt_dir, [&](const std::string& path) {
    return read_train_state(path, model.table(), host, shard_layout);
  });
  int64_t start_step = 0;
  if (resumed) {
    restore_train_state(host, model, opt, shard_layout);
    start_step = resumed->meta.step;
    if (rank0) truncate_metrics_after(cfg.run.dir, start_step);
    log::info("resumed from {} at step {} ({} tokens consumed)", resumed->path, start_step,
              human_count(static_cast<double>(resumed->meta.tokens_consumed)));
  }
  require_no_newer_checkpoints(ckpt_dir, start_step);
  const std::string config_path = rank0 ? write_resolved_config(cfg, cfg.run.dir) : "";
  MetricsWriter metrics(rank0 ? cfg.run.dir : "", resumed.has_value());
  log::info("run dir: {} (config {}, metrics {}, checkpoints {} every {})", cfg.run.dir, config_path,
            metrics.path(), ckpt_dir,
            cfg.checkpoint.every > 0 ? fmt::format("{} steps", cfg.checkpoint.every) : "run's end");

  // ---- loop ----
  install_stop_handlers();
  TrainSummary summary;
  summary.last_step = start_step;
  int64_t saved_step = resumed ? start_step : -1;
  double lr = start_step > 0 ? sched.at(start_step - 1) : 0;
  Timer run_timer;
  double loss_window = 0;
  int window_steps = 0;
  for (int64_t step = start_step; step < cfg.train.steps; ++step) {
    Timer step_timer;
    const double blocked_before = dist::blocked_seconds();
    lr = sched.at(step);
    const StepResult r = pipe ? pipe->step(batch, step, lr) : train_step(setup, batch, step, lr);
    be.synchronize();
    const double step_s = step_timer.seconds();
    const double comm_share = (dist::blocked_seconds() - blocked_before) / step_s;
    const double loss = r.loss;
    const ClipResult clip{.norm = r.grad_norm, .scale = r.clip_scale};

    summary.steps_done++;
    summary.last_step = step + 1;
    summary.last_loss = loss;
    loss_window += loss;
    window_steps++;

    StepMetrics m;
    m.step = step + 1;
    m.loss = loss;
    m.lr = lr;
    m.grad_norm = clip.norm;
    m.step_ms = step_s * 1e3;
    m.tokens_per_s = tokens_per_step / step_s;
    m.tflops_per_gpu = flops / step_s / 1e12;
    if (peak > 0) m.mfu = m.tflops_per_gpu / peak;
    const bool last = step + 1 == cfg.train.steps;
    const bool eval_now = valid_loader && ((cfg.train.eval_every > 0 && (step + 1) % cfg.train.eval_every == 0) || last);
    if (eval_now) {
      if (pipe) {
        const BatchRows rows = [&](int64_t b, int row, int n, int32_t* x, int32_t* y) {
          valid_loader->eval_rows(static_cast<int>(b), cfg.train.global_batch, row, n, x, y);
        };
        m.val_loss = pipe->evaluate(rows, cfg.train.eval_steps, cfg.train.global_batch);
      } else {
        m.val_loss = evaluate(model, *valid_loader, cfg.train.eval_steps, cfg.train.global_batch,
                              micro, dp_comm);
      }
      summary.last_val_loss = m.val_loss;
    }
    const bool log_now = (step + 1) % cfg.train.log_every == 0 || last || step == 0 || eval_now;
    if (log_now || eval_now) metrics.write(m);
    if (log_now) {
      const double elapsed = run_timer.seconds();
      const double eta = elapsed / (step + 1 - start_step) * (cfg.train.steps - step - 1);
      log::info("step {:>6}/{} | loss {:.4f}{} | lr {:.2e} | norm {:.3f} | {:.0f} ms | {} tok/s | "
                "{:.3f} TFLOP/s{}{} | eta {}",
                step + 1, cfg.train.steps, loss_window / window_steps,
                m.val_loss ? fmt::format(" | val {:.4f}", *m.val_loss) : std::string(), lr,
                clip.norm, m.step_ms, human_count(m.tokens_per_s), m.tflops_per_gpu,
                m.mfu ? fmt::format(" | mfu {:.1f}%", 100 * *m.mfu) : std::string(),
                world_size > 1 ? fmt::format(" | comm {:.0f}%", 100 * comm_share) : std::string(),
                human_duration(eta));
      loss_window = 0;
      window_steps = 0;
    }
    if (cfg.checkpoint.every > 0 && (step + 1) % cfg.checkpoint.every == 0) {
      summary.checkpoint_path = save_state(cfg, model, opt, host, step + 1, lr, shard_layout);
      saved_step = step + 1;
    }
    // Every rank stops after the same step, whichever of them got the signal.
    const bool stop = world_size > 1 ? world->all_reduce_scalar(stop_requested() ? 1.0 : 0.0) > 0
                                     : stop_requested();
    if (stop) {
      summary.stopped_by_signal = true;
      log::info("stop requested (signal {}): stopping after step {}", stop_signal_number(), step + 1);
      break;
    }
  }

  // ---- final checkpoint (also when stopped by a signal) and a sample ----
  if (async_pipe && !pipe->drained()) {
    // An asynchronous pipeline stopped between drain points has micro-batches in flight on older
    // weight versions: its state is not a checkpoint one could resume exactly.
    log::warn("stopped in the middle of an asynchronous pipeline segment ({} drains at multiples of "
              "checkpoint.every): no checkpoint written for step {}; the newest is {}",
              cfg.parallel.schedule, summary.last_step,
              saved_step >= 0 ? fmt::format("step {}", saved_step) : std::string("none"));
  } else if (saved_step != summary.last_step)
    summary.checkpoint_path = save_state(cfg, model, opt, host, summary.last_step, lr, shard_layout);
  else if (start_step >= cfg.train.steps)
    log::info("nothing to train: the checkpoint is at step {}, train.steps = {}", start_step, cfg.train.steps);
  // Sampling needs the full logits and the whole model: tp = pp = 1; one replica is enough.
  if (tokenizer && !summary.stopped_by_signal && tp_size == 1 && pp_size == 1 && rank0) {
    SampleOptions so;
    so.seed = cfg.train.seed;
    so.tokens = 48;
    const std::string prompt = "The";
    std::vector<int32_t> ids = tokenizer->encode(prompt);
    const std::vector<int32_t> more = sample_tokens(model, ids, so);
    ids.insert(ids.end(), more.begin(), more.end());
    log::info("sample: {}", tokenizer->decode(ids));
  }
  return summary;
}

}  // namespace baton
