#include "train/loop/session.h"

#include <cmath>
#include <filesystem>
#include <numeric>

#include "config/device_emulation.h"
#include "config/virtual_workers.h"
#include "core/build_info.h"
#include "core/bytes.h"
#include "core/error.h"
#include "core/log.h"
#include "core/stop_signal.h"
#include "core/timer.h"
#include "dist/device_comm.h"
#include "dist/mpi_comm.h"
#include "dist/node_local.h"
#include "data/tokenizer.h"
#include "model/cnn.h"
#include "model/gpt.h"
#include "pipeline/schedules.h"
#include "train/checkpoint/checkpoint_dir.h"
#include "train/checkpoint/checkpoint_resume.h"
#include "train/checkpoint/hf_gpt2.h"
#include "train/observe/run_trace.h"

namespace baton {
namespace {

uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

void BatchSource::valid_rows(int, int, int, int, HostBatch&) const {
  throw Error("this data source has no validation set", "");
}

void SyntheticTokens::train_rows(int64_t step, int row, int n, HostBatch& out) const {
  // Row r of step s is the sequence t_0..t_T of splitmix64(seed, s, r, i) mod vocab; x = t_0..t_{T-1},
  // y = t_1..t_T, as a loader's rows are.
  out.B = n;
  out.T = T_;
  out.tokens.resize(size_t(n) * T_);
  out.targets.resize(size_t(n) * T_);
  for (int r = 0; r < n; ++r) {
    const uint64_t base = splitmix64(splitmix64(splitmix64(seed_) ^ uint64_t(step)) ^ uint64_t(row + r));
    auto tok = [&](int i) { return static_cast<int32_t>(splitmix64(base ^ uint64_t(i)) % uint64_t(vocab_)); };
    int32_t prev = tok(0);
    for (int i = 0; i < T_; ++i) {
      const int32_t next = tok(i + 1);
      out.tokens[size_t(r) * T_ + i] = prev;
      out.targets[size_t(r) * T_ + i] = next;
      prev = next;
    }
  }
}

std::string SyntheticTokens::describe() const {
  return fmt::format("synthetic uniform random ids in [0, {}) from seed {}", vocab_, seed_);
}

std::shared_ptr<const ModelBuilder> model_builder(const Config& cfg, int tokenizer_vocab) {
  check_trainable(cfg);
  if (cfg.model.kind != ModelKind::GPT) return make_cnn(cnn_dims(cfg.model));
  const GptDims dims = gpt_dims(cfg.model, tokenizer_vocab);
  BATON_REQUIRE(dims.vocab_padded % cfg.parallel.tp == 0,
                fmt::format("parallel.tp = {} does not divide the padded vocabulary ({} = {} rounded up "
                            "to a multiple of 128)", cfg.parallel.tp, dims.vocab_padded, dims.vocab),
                "use a power-of-two tp (the vocabulary is split evenly across tensor-parallel ranks)");
  return make_gpt(dims);
}

namespace {

// hetero.virtual_workers (one VW per rank when empty) as groups of the Layout: VW k's pipeline is
// its stages in order, on the ranks it lists, with its layers or the model's even split.
dist::Layout virtual_worker_layout(const HeteroConfig& h, int world_size, const ModelBuilder& model) {
  std::vector<dist::PipelineSpec> pipes;
  std::vector<std::vector<int>> ranks;
  const std::vector<VirtualWorker> vws = virtual_workers(h, world_size);
  for (size_t k = 0; k < vws.size(); ++k) {
    const VirtualWorker& vw = vws[k];
    dist::PipelineSpec p{.pp = static_cast<int>(vw.stages.size())};
    const std::vector<std::vector<int>> given = vw.layer_ranges(model.num_layers(), static_cast<int>(k));
    if (given.empty()) {
      p.stages = model.default_stages(p.pp);
    } else {
      for (const std::vector<int>& r : given) p.stages.push_back({r[0], r[1]});
    }
    dist::check_pipeline(p, model.num_layers());
    pipes.push_back(std::move(p));
    ranks.push_back(vw.ranks());
  }
  return dist::Layout::virtual_workers(pipes, ranks);
}

}  // namespace

dist::Layout layout_from_config(const Config& cfg, int world_size, const ModelBuilder& model) {
  if (trains_virtual_workers(cfg.hetero)) return virtual_worker_layout(cfg.hetero, world_size, model);
  const ParallelConfig& p = cfg.parallel;
  dist::PipelineSpec pipe{.pp = p.pp, .vp = p.vp, .replicas = p.replicas};
  if (std::all_of(pipe.replicas.begin(), pipe.replicas.end(), [](int r) { return r == 1; }))
    pipe.replicas.clear();  // canonical form: no replication
  if (p.stages.empty()) {
    pipe.stages = model.default_stages(p.pp * p.vp);
  } else {
    for (const std::vector<int>& r : p.stages) pipe.stages.push_back({r[0], r[1]});
  }
  dist::check_pipeline(pipe, model.num_layers());
  const int per_pipeline = p.tp * pipe.ranks();
  BATON_REQUIRE(world_size % per_pipeline == 0,
                fmt::format("{} ranks do not split into pipelines of tp {} x {} ranks", world_size,
                            p.tp, pipe.ranks()),
                "launch a multiple of tp × pp ranks (with parallel.replicas, pp counts every replica)");
  return dist::Layout::grid(p.tp, world_size / per_pipeline, pipe);
}

void training_preflight(const Config& cfg, int world_size) {
  check_trainable(cfg);
  int vocab = 0;
  if (cfg.model.vocab_size == 0 && !cfg.data.tokenizer.empty())
    vocab = load_tokenizer(cfg.data)->vocab_size();
  layout_from_config(cfg, world_size, *model_builder(cfg, vocab));  // virtual workers: every rank in one
  if (trains_virtual_workers(cfg.hetero))
    rank_emulation(cfg, world_size);  // slowdown / memory_limit: one per rank, devices known
}

TrainSession::TrainSession(const Config& cfg, dist::Comm& world,
                           std::shared_ptr<const ModelBuilder> builder, std::unique_ptr<BatchSource> data,
                           SessionOptions options)
    : cfg_(cfg), world_(world), builder_(std::move(builder)),
      layout_(layout_from_config(cfg_, world.size(), *builder_)), data_(std::move(data)) {
  const int rank = world.rank();
  const dist::RankPlace& me = layout_.place(rank);
  const int T = builder_->max_positions();

  // ---- device, communicators ----
  // Each rank of a node takes its own GPU (local rank % visible GPUs).
  choice_ = choose_backend(cfg_.precision.device, parse_compute_dtype(cfg_.precision.compute),
                           world.size() > 1 ? dist::node_local().local_rank : 0,
                           parse_attention_kernel(cfg_.precision.attention));
  // baton bench with BATON_OP_TIMES=1: every backend op timed (the op-time table).
  if (options.op_times) {
    auto timed = std::make_unique<OpTimedBackend>(std::move(choice_.backend));
    op_times_ = timed.get();
    choice_.backend = std::move(timed);
  }
  Backend& be = *choice_.backend;
  if (options.memory_limit.bytes != 0) be.set_memory_limit(options.memory_limit);
  // cuDNN's CNN ops are checked on the CPU emulator (ops and whole networks against the CPU
  // backend) but not yet on a GPU: say so once instead of refusing (issue 20).
  if (builder_->input_kind() == InputKind::IMAGES && choice_.device == "cuda" && rank == 0)
    log::warn("{} on the GPU: baton's cuDNN path is tested on a CUDA emulator, not yet on a GPU (docs/cuda.md); "
              "compare a few steps with precision.device = \"cpu\" if the losses look wrong",
              builder_->family());
  // The layers sharing parameters across stages (a GPT's tied wte): one tied group.
  std::vector<int> tied_layers;
  for (const TiedLayers& t : builder_->tied_layers())
    tied_layers.insert(tied_layers.end(), t.layers.begin(), t.layers.end());
  if (world.size() > 1 && choice_.device == "cuda") {
    // GPU buffers travel over NCCL (collectives, on its own stream ordered against the backend's
    // by events) and host statistics over MPI: one communicator that routes by pointer
    // (dist/device_comm.h), split into the groups like the MPI world.
    device_world_ = dist::make_device_comm(world.split(0, rank), choice_.cuda_device, be.native_stream());
    groups_ = dist::make_process_groups(*device_world_, layout_, tied_layers);
  } else {
    groups_ = dist::make_process_groups(world, layout_, tied_layers);
  }
  // How a step of this rank's group runs: a virtual worker steps alone (its rows of each global
  // batch; hetpipe over its stages, or a one-stage flush program, one update per minibatch).
  const dist::PipelineSpec& pipe = layout_.pipeline(me.group);
  const bool vws = layout_.virtual_workers();
  schedule_ = !vws ? cfg_.parallel.schedule : pipe.ranks() > 1 ? "hetpipe" : "1f1b";
  step_rows_ = vws ? cfg_.train.global_batch / layout_.num_groups() : cfg_.train.global_batch;
  step_ranks_ = vws ? layout_.tp() * pipe.ranks() : world.size();

  // ---- model, optimizer ----
  const int tp = layout_.tp();
  if (tp > 1)
    tpc_ = {.rank = me.tp_rank, .size = tp, .sequence_parallel = cfg_.parallel.sequence_parallel,
            .comm = groups_.tp.get()};
  const int dp = layout_.dp();
  model_ = std::make_unique<SequentialModel>(builder_, be, tpc_, me.chunks,
                                             parse_recompute(cfg_.parallel.recompute), 16 * size_t(dp));
  SequentialModel& model = *model_;
  model.init_weights(cfg_.train.seed);
  model.set_seed(cfg_.train.seed);  // dropout masks
  dpg_ = std::make_unique<DataParallelGrads>(be, model.table(), model.layer_of_param(),
                                             dp > 1 ? groups_.dp.get() : nullptr, cfg_.parallel.zero1,
                                             static_cast<size_t>(cfg_.parallel.bucket_mb * 1048576.0),
                                             me.tp_rank == 0);
  // One file per checkpoint, over the ranks that write it: the job's, or each VW's own.
  dist::Comm& file = vws ? *groups_.group : world_;
  shard_layout_ = shard_layout(layout_, rank, model, file.size() > 1 ? file.mpi_handle() : MPI_COMM_NULL, dpg_.get(),
                               groups_.tp.get(), vws ? vw_checkpoint_dir(cfg_.checkpoint_dir(), me.group) : cfg_.checkpoint_dir());
  opt_ = make_optimizer(be, dpg_->segments(), dpg_->state_size(), cfg_.optim);
  opt_states_ = opt_->state().size();
  if (cfg_.run.trace) timeline_ = std::make_unique<pipeline::Timeline>(cfg_.run.trace_steps);
  runner_ = std::make_unique<StepRunner>(StepRunnerSetup{
      .model = &model, .optimizer = opt_.get(), .grads = dpg_.get(), .layout = &layout_, .rank = rank,
      .groups = &groups_, .schedule = schedule_,
      .scatter_gather = cfg_.parallel.scatter_gather, .vertical_sync = cfg_.parallel.vertical_sync,
      .nm = schedule_ == "hetpipe" ? cfg_.hetero.nm : 0, .hooks = options.hooks,
      .global_batch = step_rows_, .micro_batch = cfg_.train.micro_batch, .T = T,
      .grad_clip = cfg_.optim.grad_clip, .total_steps = cfg_.train.steps,
      .drain_every = cfg_.checkpoint.every, .record = options.record_instructions,
      .timeline = timeline_.get()});
  BatchSource* src = data_.get();
  batch_ = [src, this](int64_t step, int row, int n, HostBatch& out) {
    src->train_rows(step + data_offset_, row, n, out);
  };
  flops_ = builder_->flops_per_step(step_rows_);
  peak_ = dense_peak_tflops(choice_.device_name, parse_compute_dtype(cfg_.precision.compute));
  if (timeline_) {  // one origin for the job: every rank leaves the barrier at about the same time
    world_.barrier();
    trace_origin_ = pipeline::Timeline::now();
  }
}

TrainSession::~TrainSession() = default;

void TrainSession::log_header() {
  const int vp = cfg_.parallel.vp;
  const dist::RankPlace& me = layout_.place(world_.rank());
  const dist::PipelineSpec& pipe = layout_.pipeline(me.group);
  SequentialModel& model = *model_;
  log::info("baton {} | device {} ({}) | compute {} | {} rank{}: {}{}{}", build::version,
            choice_.device, choice_.device_name,
            model.act_dtype() == DType::F32 ? "fp32" : "bf16 (fp32 master weights)", world_size(),
            world_size() > 1 ? "s" : "", layout_.describe(), tpc_.sp() ? " | sequence parallel" : "",
            dpg_->zero1() ? " | ZeRO-1" : "");
  if (pipe.ranks() > 1) {
    const pipeline::ScheduleTraits& t = runner_->traits();
    std::string stages;
    for (const LayerRange& r : pipe.stages) stages += fmt::format(" [{},{})", r.begin, r.end);
    std::string update;
    if (!t.synchronous())
      update = fmt::format(" | {}, drained every {}",
                           t.update == pipeline::UpdateRule::PER_MICROBATCH
                               ? pipe.replicas.empty()
                                     ? "one update per micro-batch"
                                     : "1F1B-RR: one update per round of a stage's replicas (their gradients summed)"
                               : "one update per batch on W(t-1)",
                           cfg_.checkpoint.every > 0 ? fmt::format("{} steps", cfg_.checkpoint.every)
                                                     : std::string("run (at its end)"));
    log::info("pipeline: schedule {}{} | {} micro-batches per step | {} activation slots on this "
              "rank (the schedule's simulated peak{}) | model stages (global layers){}{}{}",
              schedule_, vp > 1 ? fmt::format(", {} chunks per rank", vp) : std::string(),
              runner_->microbatches(), runner_->slots(), t.synchronous() ? "" : " + 1 for evaluation",
              stages, cfg_.parallel.scatter_gather ? " | scatter/gather" : "", update);
  }
  if (!choice_.note.empty()) log::info("note: {}", choice_.note);
  // Parameters of the whole model: each rank's tensor-parallel shards, replicated tensors on tp
  // rank 0, tied parameters once (on the stage that owns them), summed over the job and divided by
  // the data-parallel groups and stage replicas.
  double n_params = 0;
  for (int i = 0; i < model.table().size(); ++i)
    if ((model.table().spec(i).tp_dim >= 0 || tpc_.rank == 0) && model.owns_param(i) && me.replica == 0)
      n_params += static_cast<double>(model.table().numel(i));
  if (world_size() > 1) n_params = world_.all_reduce_scalar(n_params) / layout_.num_groups();
  n_params_ = n_params;
  log::info("model: {} | {} parameters", builder_->describe(), human_count(n_params));
  // A virtual worker's steps are its own rows of each global batch.
  std::string data = data_->describe();
  if (layout_.virtual_workers())
    data += fmt::format(" | this VW: rows [{}, {}) of each global batch", me.group * step_rows_,
                        (me.group + 1) * step_rows_);
  if (builder_->input_kind() == InputKind::IMAGES)
    log::info("data: {} | {} images/step = {} x {} micro-batches", data, tokens_per_step(),
              runner_->microbatches() * layout_.dp(), cfg_.train.micro_batch);
  else
    log::info("data: {} | {} tokens/step = {} x {} micro-batches x {} seq", data, tokens_per_step(),
              runner_->microbatches() * layout_.dp(), cfg_.train.micro_batch, builder_->max_positions());
  const std::string baseline = data_->baseline();
  if (!baseline.empty()) log::info("baseline: {}", baseline);
  log::info("memory per rank: params+grads {:.1f} MiB, {} {:.1f} MiB, activations {:.1f} MiB "
            "(peak: {} slot{}, recompute {})",
            2.0 * model.flat_size() * sizeof(float) / 1048576.0,
            cfg_.optim.kind, double(opt_->state().size()) * opt_->state_size() * sizeof(float) / 1048576.0,
            model.activation_bytes() / 1048576.0,
            model.num_slots(), model.num_slots() > 1 ? "s" : "", cfg_.parallel.recompute);
  log::info("flops: {} = {:.3g} per step; peak {}", builder_->flops_formula(), flops_,
            peak_ > 0 ? fmt::format("{:.0f} TFLOP/s dense {} (MFU reported)", peak_, cfg_.precision.compute)
                      : fmt::format("unknown for this device and {} (MFU not reported)", cfg_.precision.compute));
}

HostTrainState& TrainSession::host() {
  // Host staging of params, m and v: three copies of the model, allocated on first use (a bench
  // never checkpoints).
  if (!host_) {
    std::vector<std::string> groups;
    for (const Optimizer::State& s : opt_->state()) groups.emplace_back(s.group);
    host_ = std::make_unique<HostTrainState>(model_->table(), model_->flat_size(), groups);
  }
  return *host_;
}

// What a checkpoint's model is cannot change under it: its shape (the tensors would not fit, or
// would fit and mean something else) and kind. Refused before any tensor is read, naming the keys.
void TrainSession::refuse_model_changes(const std::string& saved, const std::string& now, const std::string& path) {
  std::string changed;
  for (const ConfigChange& c : config_changes(saved, now))
    if (c.key.rfind("model.", 0) == 0 && c.key != "model.dropout" && c.key != "model.init_from")
      changed += fmt::format("{}{} {} -> {}", changed.empty() ? "" : ", ", c.key, c.before, c.after);
  BATON_REQUIRE(changed.empty(),
                fmt::format("checkpoint '{}' holds another model than the config: {}", path, changed),
                "resume with the model keys the checkpoint was trained with (`baton ckpt inspect PATH --config` "
                "prints them), or start a new run (another run.dir, or checkpoint.resume = \"never\")");
}

std::optional<int64_t> TrainSession::resume() {
  const std::string ckpt_dir = cfg_.checkpoint_dir();
  const std::string now = cfg_.to_toml();
  const auto resumed = choose_resume_point(cfg_.checkpoint, ckpt_dir, [&](const std::string& path) {
    refuse_model_changes(CheckpointReader(path).meta().config_toml, now, path);
    return read_train_state(path, model_->table(), host(), shard_layout_);
  });
  int64_t start_step = 0;
  if (resumed) {
    restore_train_state(host(), *model_, *opt_, shard_layout_);
    start_step = resumed->meta.step;
    resumed_at_ = start_step;
    data_offset_ = resumed->meta.data_position - resumed->meta.step;
    resumed_guard_state_ = resumed->meta.guard_state;
    log::info("resumed from {} at step {} ({} tokens consumed)", resumed->path, start_step,
              human_count(static_cast<double>(resumed->meta.tokens_consumed)));
    resume_changes_.clear();
    for (ConfigChange& c : config_changes(resumed->meta.config_toml, now))
      if (c.key != "checkpoint.resume") resume_changes_.push_back(std::move(c));
    if (!resume_changes_.empty()) {
      std::string list;
      for (const ConfigChange& c : resume_changes_) list += fmt::format("{}{} {} -> {}", list.empty() ? "" : ", ", c.key, c.before, c.after);
      log::info("resumed with changed settings: {}", list);
    }
  }
  require_no_newer_checkpoints(ckpt_dir, start_step);
  if (!resumed) return std::nullopt;
  return start_step;
}

TimedStep TrainSession::step(int64_t step, double lr) {
  if (timeline_) timeline_->begin_step(step + 1);
  const double trace_start = timeline_ ? pipeline::Timeline::now() : 0;
  Timer step_timer;
  const double blocked_before = dist::blocked_seconds();
  TimedStep t;
  t.result = runner_->step(batch_, step, lr);
  choice_.backend->synchronize();
  t.seconds = step_timer.seconds();
  t.comm_seconds = dist::blocked_seconds() - blocked_before;
  if (timeline_) timeline_->span(pipeline::Activity::STEP, trace_start, pipeline::Timeline::now());
  if (!memory_logged_) {  // every buffer exists after one step (issue 6: peak memory in the log)
    memory_logged_ = true;
    const std::string mem = choice_.backend->memory_summary();
    if (!mem.empty()) log::info("{} (after the first step)", mem);
  }
  return t;
}

std::optional<EvalResult> TrainSession::evaluate(int batches) {
  if (!data_->has_valid()) return std::nullopt;
  const int rows = step_rows_;  // a VW evaluates batches of its own size, all of them
  const BatchSource* src = data_.get();
  const BatchFn rows_fn = [src, rows](int64_t b, int row, int n, HostBatch& out) {
    src->valid_rows(static_cast<int>(b), rows, row, n, out);
  };
  const double start = pipeline::Timeline::now();
  EvalResult r = runner_->evaluate(rows_fn, batches > 0 ? batches : cfg_.train.eval_steps, rows);
  if (timeline_) timeline_->span(pipeline::Activity::EVAL, start, pipeline::Timeline::now());
  return r;
}

bool TrainSession::init_from_pretrained() {
  const std::string& from = cfg_.model.init_from;
  if (from.empty()) return false;
  BATON_ASSERT(from.rfind("hf:", 0) == 0, "model.init_from = '{}' passed validation", from);
  const std::string dir = from.substr(3);
  const GptDims& d = gpt_dims_of(*builder_);
  const std::string vocab_source = cfg_.model.vocab_size > 0 ? std::string("model.vocab_size")
                                                              : fmt::format("the tokenizer '{}'", cfg_.data.tokenizer);
  Timer timer;
  SequentialModel& model = *model_;
  Backend& be = *choice_.backend;
  HostTrainState& h = host();
  std::string what, hint, described;
  try {
    HfGpt2Source src(dir);
    src.check(d, vocab_source);
    // This rank's boxes over its current parameters (the flat buffer's alignment padding stays).
    be.to_host(h.params.data(), model.params(), model.table().total() * sizeof(float));
    src.read(table_shards(model.table(), h.params.data(), kParamsGroup, shard_layout_), d);
    described = src.describe();
  } catch (const Error& e) {
    what = e.what();
    hint = e.hint();
  }
  // Ranks read different tensors: the lowest rank that failed speaks for the job.
  if (world_.size() > 1) {
    const double first = world_.all_reduce_scalar(what.empty() ? 1e9 : world_.rank(), dist::ReduceOp::MIN);
    if (first < 1e9) {
      const int who = static_cast<int>(first);
      throw AgreedError(world_.broadcast_string(what, who), world_.broadcast_string(hint, who));
    }
  } else if (!what.empty()) {
    throw Error(what, hint);
  }
  be.to_device(model.params(), h.params.data(), model.table().total() * sizeof(float));
  model.refresh_compute_params();
  log::info("initialised from hf:{} in {:.2f} s (every rank its shards; wte's {} padding rows zero)", described,
            timer.seconds(), d.vocab_padded - d.vocab);
  return true;
}

CheckpointMeta TrainSession::load(const std::string& path) {
  const CheckpointMeta meta = read_train_state(path, model_->table(), host(), shard_layout_);
  restore_train_state(host(), *model_, *opt_, shard_layout_);
  return meta;
}

CheckpointMeta TrainSession::rewind(const std::string& path, int64_t next_data_step) {
  const CheckpointMeta meta = load(path);
  data_offset_ = next_data_step - meta.step;
  return meta;
}

std::string TrainSession::save(int64_t step, double lr) {
  const double start = pipeline::Timeline::now();
  const SaveResult r =
      save_train_state(cfg_, *model_, *opt_, host(), step, lr, shard_layout_, {data_offset_, guard_state_});
  if (timeline_) timeline_->span(pipeline::Activity::CHECKPOINT, start, pipeline::Timeline::now());
  log::info("saved {} ({:.1f} MB) in {:.2f} s", std::filesystem::path(r.path).filename().string(),
            r.bytes / 1e6, r.seconds);
  return r.path;
}

bool TrainSession::checkpointable() const { return runner_->drained(); }

StepMetrics TrainSession::metrics(int64_t step, double lr, const TimedStep& t) const {
  StepMetrics m;
  m.step = step + 1;
  m.loss = t.result.loss;
  if (step == resumed_at_ && !resume_changes_.empty())
    for (const ConfigChange& c : resume_changes_) m.resumed_changes.emplace_back(c.key, std::make_pair(c.before, c.after));
  m.lr = lr;
  m.grad_norm = t.result.grad_norm;
  m.step_ms = t.seconds * 1e3;
  m.tokens_per_s = tokens_per_step() / t.seconds;
  if (builder_->input_kind() == InputKind::IMAGES) m.images_per_s = m.tokens_per_s;
  // Per device (DESIGN §6): the job's model FLOPs shared by its ranks.
  m.tflops_per_gpu = flops_ / t.seconds / 1e12 / step_ranks_;
  if (peak_ > 0) m.mfu = m.tflops_per_gpu / peak_;
  if (step_ranks_ > 1) m.comm_share = t.comm_seconds / t.seconds;
  return m;
}

bool TrainSession::stop_requested_anywhere() const {
  BATON_ASSERT(!layout_.virtual_workers(), "virtual workers do not step in lockstep: their stop is the strategy's");
  return world_.size() > 1 ? world_.all_reduce_scalar(stop_requested() ? 1.0 : 0.0) > 0 : stop_requested();
}

}  // namespace baton

namespace baton {

std::string TrainSession::write_trace() {
  // Every rank begins the same steps, so all agree on whether there is anything to gather.
  if (!timeline_ || timeline_->steps().empty()) return "";
  const std::string path = cfg_.run.dir + "/trace.json";
  const RunTraceSummary s =
      write_run_trace(*timeline_, trace_origin_, world_, layout_, runner_->executor().program(), path);
  if (!rank0()) return "";
  const std::vector<int64_t>& steps = timeline_->steps();
  auto percents = [](const std::vector<double>& v) {
    std::string out;
    for (double x : v) out += fmt::format("{}{:.0f}%", out.empty() ? "" : " ", 100 * x);
    return out;
  };
  log::info("trace: {} ({} events of steps {}-{} on {} rank{}, beside the simulator's prediction) | idle share "
            "per rank {} (predicted per pipeline rank {}) | open it in https://ui.perfetto.dev (Open trace file) "
            "or chrome://tracing",
            path, s.events, steps.front(), steps.back(), world_size(), world_size() > 1 ? "s" : "",
            percents(s.idle_share), percents(s.predicted_idle_share));
  return path;
}

}  // namespace baton
