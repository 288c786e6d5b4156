#include "train/session.h"

#include <cmath>
#include <filesystem>
#include <numeric>

#include "core/build_info.h"
#include "core/error.h"
#include "core/log.h"
#include "core/stop_signal.h"
#include "core/timer.h"
#include "dist/device_comm.h"
#include "dist/node_local.h"
#include "dist/mpi_comm.h"
#include "train/checkpoint_resume.h"
#include "train/pipeline_step.h"

namespace baton {
namespace {

std::string human_count(double x) {
  if (x >= 1e9) return fmt::format("{:.2f}G", x / 1e9);
  if (x >= 1e6) return fmt::format("{:.2f}M", x / 1e6);
  if (x >= 1e3) return fmt::format("{:.1f}k", x / 1e3);
  return fmt::format("{:.0f}", x);
}

// Mean loss over `batches` validation batches of `rows` sequences. Data-parallel rank d evaluates
// its slice of each batch; the sums meet in one all-reduce. Every tensor-parallel rank runs the
// forward (the model's collectives need all of them) and gets the same losses.
double evaluate_rows(GptModel& model, const BatchRows& rows_fn, int T, int batches, int rows,
                     int micro, dist::Comm* dp) {
  const int dp_size = dp ? dp->size() : 1, dp_rank = dp ? dp->rank() : 0;
  const int mine = rows / dp_size;
  std::vector<int32_t> x(size_t(micro) * T), y(size_t(micro) * T);
  double sum = 0;
  for (int b = 0; b < batches; ++b) {
    for (int r = 0; r < mine; r += micro) {
      rows_fn(b, dp_rank * mine + r, micro, x.data(), y.data());
      sum += model.forward(0, x.data(), y.data(), micro, T, false, 0.0f);
    }
  }
  if (dp) sum = dp->all_reduce_scalar(sum);
  return sum / (double(batches) * rows * T);
}

uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

void TokenSource::valid_rows(int, int, int, int, int32_t*, int32_t*) const {
  throw Error("this token source has no validation set", "");
}

void SyntheticTokens::train_rows(int64_t step, int row, int n, int32_t* x, int32_t* y) const {
  // Row r of step s is the sequence t_0..t_T of splitmix64(seed, s, r, i) mod vocab; x = t_0..t_{T-1},
  // y = t_1..t_T, as a loader's rows are.
  for (int r = 0; r < n; ++r) {
    const uint64_t base = splitmix64(splitmix64(splitmix64(seed_) ^ uint64_t(step)) ^ uint64_t(row + r));
    auto tok = [&](int i) { return static_cast<int32_t>(splitmix64(base ^ uint64_t(i)) % uint64_t(vocab_)); };
    int32_t prev = tok(0);
    for (int i = 0; i < T_; ++i) {
      const int32_t next = tok(i + 1);
      x[size_t(r) * T_ + i] = prev;
      y[size_t(r) * T_ + i] = next;
      prev = next;
    }
  }
}

std::string SyntheticTokens::describe() const {
  return fmt::format("synthetic uniform random ids in [0, {}) from seed {}", vocab_, seed_);
}

void check_trainable(const Config& cfg, int world_size, bool needs_dataset) {
  BATON_REQUIRE(cfg.model.kind == "gpt",
                fmt::format("model.kind = \"{}\" is not trainable yet", cfg.model.kind),
                "only GPT models train today; CNNs arrive with the HetPipe/CNN issue");
  BATON_REQUIRE(cfg.optim.kind == "adamw",
                fmt::format("optim.kind = \"{}\" is not implemented yet", cfg.optim.kind),
                "use optim.kind = \"adamw\"");
  BATON_REQUIRE(cfg.model.dropout == 0.0, "model.dropout > 0 is not implemented yet",
                "set model.dropout = 0");
  // Weight stashing keeps fp32 weight versions and reads them directly; a bf16 copy per version
  // is not built yet.
  BATON_REQUIRE(parse_compute_dtype(cfg.precision.compute) == DType::F32 ||
                    !is_async_schedule(cfg.parallel.schedule),
                fmt::format("parallel.schedule = \"{}\" (weight stashing) with precision.compute = "
                            "\"bf16\" is not implemented yet", cfg.parallel.schedule),
                "use precision.compute = \"fp32\" with pipedream/2bw, or a flush schedule "
                "(1f1b, interleaved, zb-h1, gpipe) with bf16");
  if (needs_dataset)
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
  // pp_size: ranks of a pipeline — the sum of replicas under pipedream's replicated stages
  // (1F1B-RR, parallel.replicas), else the stages.
  const std::vector<int>& replicas = cfg.parallel.replicas;
  const int pp_size = replicas.empty() ? cfg.parallel.pp
                                       : std::accumulate(replicas.begin(), replicas.end(), 0);
  // Megatron's split of the blocks over pp·vp model stages; the same error on every rank, before
  // any collective.
  pipeline_chunks(cfg.model.n_layer, cfg.parallel.pp, cfg.parallel.vp, 0);
  BATON_REQUIRE(cfg.parallel.tp * cfg.dp * pp_size == world_size,
                fmt::format("layout tp={} x dp={} x pp={} does not match {} ranks", cfg.parallel.tp,
                            cfg.dp, pp_size, world_size),
                "launch tp*pp*dp ranks (dp comes from the world size; with parallel.replicas, pp "
                "counts every replica)");
}

GptDims session_dims(const Config& cfg, int tokenizer_vocab) {
  const GptDims dims = gpt_dims(cfg.model, tokenizer_vocab);
  BATON_REQUIRE(dims.vocab_padded % cfg.parallel.tp == 0,
                fmt::format("parallel.tp = {} does not divide the padded vocabulary ({} = {} rounded up "
                            "to a multiple of 128)", cfg.parallel.tp, dims.vocab_padded, dims.vocab),
                "use a power-of-two tp (the vocabulary is split evenly across tensor-parallel ranks)");
  return dims;
}

TrainSession::TrainSession(const Config& cfg, dist::Comm* world, int tokenizer_vocab,
                           std::unique_ptr<TokenSource> data)
    : cfg_(cfg), world_(world), data_(std::move(data)) {
  world_size_ = world ? world->size() : 1;
  check_trainable(cfg_, world_size_, false);
  const std::vector<int>& replicas = cfg_.parallel.replicas;
  tp_size_ = cfg_.parallel.tp;
  dp_size_ = cfg_.dp;
  pp_stages_ = cfg_.parallel.pp;
  pp_size_ = replicas.empty() ? pp_stages_ : std::accumulate(replicas.begin(), replicas.end(), 0);
  const int vp = cfg_.parallel.vp;
  dims_ = session_dims(cfg_, tokenizer_vocab);
  const int T = cfg_.model.seq_len;

  // ---- device, communicators ----
  // Each rank of a node takes its own GPU (local rank % visible GPUs).
  choice_ = choose_backend(cfg_.precision.device, parse_compute_dtype(cfg_.precision.compute),
                           world_size_ > 1 ? dist::node_local().local_rank : 0);
  Backend& be = *choice_.backend;
  if (world_size_ > 1 && choice_.device == "cuda") {
    // GPU buffers travel over NCCL (collectives, on its own stream ordered against the backend's
    // by events) and host statistics over MPI: one communicator that routes by pointer
    // (dist/device_comm.h), split into the groups like the MPI world.
    device_world_ = dist::make_device_comm(world->split(0, world->rank()), choice_.cuda_device,
                                           be.native_stream());
    groups_ = dist::make_process_groups(*device_world_, {tp_size_, dp_size_, pp_size_});
  } else if (world_size_ > 1) {
    groups_ = dist::make_process_groups(*world, {tp_size_, dp_size_, pp_size_});
  }

  // ---- model, optimizer ----
  if (tp_size_ > 1)
    tpc_ = {.rank = groups_.coord.tp, .size = tp_size_,
            .sequence_parallel = cfg_.parallel.sequence_parallel, .comm = groups_.tp.get()};
  BATON_REQUIRE(!tpc_.sp() || (cfg_.train.micro_batch * T) % tp_size_ == 0,
                fmt::format("sequence parallelism needs micro_batch x seq_len ({}) divisible by tp = {}",
                            cfg_.train.micro_batch * T, tp_size_),
                "change train.micro_batch or model.seq_len, or turn sequence_parallel off");
  dp_comm_ = dp_size_ > 1 ? groups_.dp.get() : nullptr;
  model_ = std::make_unique<GptModel>(
      dims_, be, tpc_, 16 * size_t(dp_size_),
      pipeline_chunks(dims_.n_layer, pp_stages_, vp, stage_of_rank(replicas, groups_.coord.pp)),
      parse_recompute(cfg_.parallel.recompute));
  GptModel& model = *model_;
  model.init_weights(cfg_.train.seed);
  const int micro = cfg_.train.micro_batch;
  model.reserve(micro, T, 1);
  dpg_ = std::make_unique<DataParallelGrads>(be, model.table(), model.layer_of_param(), dp_comm_,
                                             cfg_.parallel.zero1,
                                             static_cast<size_t>(cfg_.parallel.bucket_mb * 1048576.0),
                                             tpc_.rank == 0);
  // The last pipeline stage's copy of the tied wte: counted in the norm on the first stage only,
  // written to checkpoints by the first stage only (both stages read it).
  wte_copy_ = pp_stages_ > 1 && model.has_head() && !model.has_embedding();
  // 1F1B-RR: the replicas of a stage hold identical weights and optimizer state; replica 0 writes.
  const bool replica0 =
      replicas.empty() || !world ||
      groups_.coord.pp == stage_first_rank(replicas, stage_of_rank(replicas, groups_.coord.pp));
  if (wte_copy_) dpg_->exclude_from_norm(model.table(), model.tied_wte_param());
  opt_ = std::make_unique<AdamW>(be, dpg_->segments(), dpg_->state_size(), cfg_.optim);
  shard_layout_ = ShardLayout{.tp_rank = tpc_.rank, .tp_size = tpc_.size,
                              .writes = (!world || groups_.coord.dp == 0) && replica0,
                              .comm = world_size_ > 1 ? dynamic_cast<dist::MpiComm&>(*world).handle()
                                                      : MPI_COMM_NULL,
                              .dp = dpg_.get(),
                              .tp = tp_size_ > 1 ? groups_.tp.get() : nullptr,
                              .skip_tied_copy = wte_copy_};
  setup_ = StepSetup{.model = &model, .optimizer = opt_.get(), .grads = dpg_.get(),
                     .tp = tp_size_ > 1 ? groups_.tp.get() : nullptr, .dp = dp_comm_,
                     .dp_rank = dp_size_ > 1 ? groups_.coord.dp : 0,
                     .global_batch = cfg_.train.global_batch, .micro_batch = micro,
                     .seq_len = T, .grad_clip = cfg_.optim.grad_clip};
  TokenSource* src = data_.get();
  batch_ = [src](int64_t step, int row, int n, int32_t* x, int32_t* y) {
    src->train_rows(step, row, n, x, y);
  };
  // Pipeline parallelism: the schedule run by the executor (train/pipeline_step.h).
  if (pp_size_ > 1) {
    embedding_group_ = make_embedding_group(*groups_.pp, replicas);
    pipe_ = std::make_unique<PipelineStep>(PipelineSetup{.step = setup_, .pp = groups_.pp.get(),
                                                         .embedding = embedding_group_.get(),
                                                         .vp = vp, .schedule = cfg_.parallel.schedule,
                                                         .scatter_gather = cfg_.parallel.scatter_gather,
                                                         .vertical_sync = cfg_.parallel.vertical_sync,
                                                         .replicas = replicas,
                                                         .total_steps = cfg_.train.steps,
                                                         .drain_every = cfg_.checkpoint.every});
  }
  // Asynchronous schedules (pipedream, 2bw) run without flushes between checkpoints; the pipeline
  // drains at checkpoint.every and at the end, where checkpoints are consistent.
  async_pipe_ = pipe_ && is_async_schedule(cfg_.parallel.schedule);
  flops_ = gpt_model_flops_per_step(cfg_.train.global_batch, T, dims_.n_layer, dims_.d_model,
                                    dims_.vocab_padded);
  peak_ = dense_peak_tflops(choice_.device_name, parse_compute_dtype(cfg_.precision.compute));
}

TrainSession::~TrainSession() = default;

void TrainSession::log_header() {
  const std::vector<int>& replicas = cfg_.parallel.replicas;
  const int vp = cfg_.parallel.vp;
  const int T = dims_.seq_len;
  GptModel& model = *model_;
  log::info("baton {} | device {} ({}) | compute {} | {} rank{}: tp {} x dp {} x pp {}{}{}{}",
            build::version, choice_.device, choice_.device_name,
            model.act_dtype() == DType::F32 ? "fp32" : "bf16 (fp32 master weights)", world_size_,
            world_size_ > 1 ? "s" : "", tp_size_,
            dp_size_, pp_size_,
            replicas.empty() ? std::string()
                             : fmt::format(" ({} stages, replicas {})", pp_stages_, fmt::join(replicas, ",")),
            tpc_.sp() ? " | sequence parallel" : "", dpg_->zero1() ? " | ZeRO-1" : "");
  if (pipe_)
    log::info("pipeline: schedule {}{} | {} micro-batches per step | {} activation slots on this "
              "rank (the schedule's simulated peak{}) | {} blocks per model stage{}{}",
              cfg_.parallel.schedule, vp > 1 ? fmt::format(", {} chunks per rank", vp) : std::string(),
              pipe_->microbatches(), pipe_->slots(), async_pipe_ ? " + 1 for evaluation" : "",
              dims_.n_layer / (pp_stages_ * vp),
              cfg_.parallel.scatter_gather ? " | scatter/gather" : "",
              async_pipe_ ? fmt::format(" | {}, drained every {}", cfg_.parallel.schedule == "pipedream"
                                                                      ? replicas.empty() ? "one update per micro-batch"
                                                                      : "1F1B-RR: one update per round of a stage's replicas (their gradients summed)"
                                                                      : "one update per batch on W(t-1)",
                                        cfg_.checkpoint.every > 0
                                            ? fmt::format("{} steps", cfg_.checkpoint.every)
                                            : std::string("run (at its end)"))
                          : std::string());
  if (!choice_.note.empty()) log::info("note: {}", choice_.note);
  // Parameters of the whole model: each rank's tensor-parallel shards, replicated tensors on tp
  // rank 0, the tied wte once (first stage), summed over the job and divided by the replicas.
  double n_params = 0;
  for (int i = 0; i < model.table().size(); ++i)
    if ((model.table().spec(i).tp_dim >= 0 || tpc_.rank == 0) && !(wte_copy_ && i == model.tied_wte_param()))
      n_params += static_cast<double>(model.table().numel(i));
  if (world_size_ > 1) n_params = world_->all_reduce_scalar(n_params) / dp_size_;
  log::info("model: GPT {} layers, d_model {}, {} heads, seq_len {}, vocab {} (padded {}) | {} parameters",
            dims_.n_layer, dims_.d_model, dims_.n_head, T, dims_.vocab, dims_.vocab_padded,
            human_count(n_params));
  log::info("data: {} | {} tokens/step = {} x {} micro-batches x {} seq", data_->describe(),
            tokens_per_step(), cfg_.micro_batches_per_step() * dp_size_, cfg_.train.micro_batch, T);
  const std::string baseline = data_->baseline();
  if (!baseline.empty()) log::info("baseline: {}", baseline);
  log::info("memory per rank: params+grads {:.1f} MiB, adam {:.1f} MiB, activations {:.1f} MiB "
            "(peak: {} slot{}, recompute {})",
            2.0 * model.flat_size() * sizeof(float) / 1048576.0,
            2.0 * opt_->state_size() * sizeof(float) / 1048576.0, model.activation_bytes() / 1048576.0,
            model.num_slots(), model.num_slots() > 1 ? "s" : "", cfg_.parallel.recompute);
  log::info("flops: 72*B*s*l*h^2*(1 + s/6h + V/12lh) = {:.3g} per step; peak {}",
            flops_, peak_ > 0 ? fmt::format("{:.0f} TFLOP/s (MFU reported)", peak_)
                              : std::string("unknown for this device (MFU not reported)"));
}

HostTrainState& TrainSession::host() {
  // Host staging of params, m and v: three copies of the model, allocated on first use (a bench
  // never checkpoints).
  if (!host_) host_ = std::make_unique<HostTrainState>(model_->table(), model_->flat_size());
  return *host_;
}

std::optional<int64_t> TrainSession::resume() {
  const std::string ckpt_dir = cfg_.checkpoint_dir();
  const auto resumed = choose_resume_point(cfg_.checkpoint, ckpt_dir, [&](const std::string& path) {
    return read_train_state(path, model_->table(), host(), shard_layout_);
  });
  int64_t start_step = 0;
  if (resumed) {
    restore_train_state(host(), *model_, *opt_, shard_layout_);
    start_step = resumed->meta.step;
    log::info("resumed from {} at step {} ({} tokens consumed)", resumed->path, start_step,
              human_count(static_cast<double>(resumed->meta.tokens_consumed)));
  }
  require_no_newer_checkpoints(ckpt_dir, start_step);
  if (!resumed) return std::nullopt;
  return start_step;
}

TimedStep TrainSession::step(int64_t step, double lr) {
  Timer step_timer;
  const double blocked_before = dist::blocked_seconds();
  TimedStep t;
  t.result = pipe_ ? pipe_->step(batch_, step, lr) : train_step(setup_, batch_, step, lr);
  choice_.backend->synchronize();
  t.seconds = step_timer.seconds();
  t.comm_seconds = dist::blocked_seconds() - blocked_before;
  if (!memory_logged_) {  // every buffer exists after one step (issue 6: peak memory in the log)
    memory_logged_ = true;
    const std::string mem = choice_.backend->memory_summary();
    if (!mem.empty()) log::info("{} (after the first step)", mem);
  }
  return t;
}

std::optional<double> TrainSession::evaluate() {
  if (!data_->has_valid()) return std::nullopt;
  const int rows = cfg_.train.global_batch;
  const TokenSource* src = data_.get();
  const BatchRows rows_fn = [src, rows](int64_t b, int row, int n, int32_t* x, int32_t* y) {
    src->valid_rows(static_cast<int>(b), rows, row, n, x, y);
  };
  if (pipe_) return pipe_->evaluate(rows_fn, cfg_.train.eval_steps, rows);
  return evaluate_rows(*model_, rows_fn, dims_.seq_len, cfg_.train.eval_steps, rows,
                       cfg_.train.micro_batch, dp_comm_);
}

std::string TrainSession::save(int64_t step, double lr) {
  const SaveResult r = save_train_state(cfg_, *model_, *opt_, host(), step, lr, shard_layout_);
  log::info("saved {} ({:.1f} MB) in {:.2f} s", std::filesystem::path(r.path).filename().string(),
            r.bytes / 1e6, r.seconds);
  return r.path;
}

bool TrainSession::checkpointable() const { return !async_pipe_ || pipe_->drained(); }

StepMetrics TrainSession::metrics(int64_t step, double lr, const TimedStep& t) const {
  StepMetrics m;
  m.step = step + 1;
  m.loss = t.result.loss;
  m.lr = lr;
  m.grad_norm = t.result.grad_norm;
  m.step_ms = t.seconds * 1e3;
  m.tokens_per_s = tokens_per_step() / t.seconds;
  // Per device (DESIGN §6): the job's model FLOPs shared by its world_size ranks.
  m.tflops_per_gpu = flops_ / t.seconds / 1e12 / world_size_;
  if (peak_ > 0) m.mfu = m.tflops_per_gpu / peak_;
  return m;
}

bool TrainSession::stop_requested_anywhere() const {
  return world_size_ > 1 ? world_->all_reduce_scalar(stop_requested() ? 1.0 : 0.0) > 0
                         : stop_requested();
}

}  // namespace baton
