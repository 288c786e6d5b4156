// One rank's training state, built once from (Config, world, model builder, batch source) and
// driven step by step: the Layout and its communicators, the (tensor- and pipeline-parallel)
// model, bucketed data-parallel gradients, the optimizer (AdamW or SGD), the StepRunner (the one step path for every
// layout and schedule), and the checkpoint shards of this rank. `train()` (train/loop/trainer.h) drives
// it with a dataset, metrics and checkpoints; `baton bench` with synthetic data and nothing
// written.
//
// Virtual workers (HetPipe's VWs: hetero.virtual_workers, or hetero.sync = "wsp") are groups of the
// same Layout (layout_from_config): each VW's step is its own — its rows of the job's global batch
// (rows [k·b, (k+1)·b), b = train.global_batch / N), its pipeline (the hetpipe schedule over its
// stages, or a one-stage flush program), its own file per checkpoint (<checkpoint.dir>/vw<k>/,
// over the VW's ranks) — and what keeps the VWs in sync is the loop's cross-group strategy
// (train/loop/cross_group_sync.h), which plugs into the step through SessionOptions::hooks.
//
// Which ranks each collective spans (docs/schedules.md "Who waits for whom"): a step's
// reductions span what the update rule synchronises — the tensor-parallel group, the pipeline and
// the data-parallel groups of every homogeneous layout (one update of the whole model per step);
// a VW's pipeline. The stop request of a homogeneous layout is agreed over the ranks that step in
// lockstep (the world), so that all stop after the same step; evaluation spans the pipeline and
// the data-parallel group; a checkpoint is a collective over the world (one file, written with
// MPI-IO) taken at a step every rank reaches, or over a VW's ranks (its file). The header's
// parameter count is one world reduction at start. Nothing else crosses a group.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/device.h"
#include "backend/op_timed_backend.h"
#include "config/config.h"
#include "config/config_diff.h"
#include "dist/comm.h"
#include "dist/layout.h"
#include "dist/process_groups.h"
#include "model/model_builder.h"
#include "model/sequential_model.h"
#include "optim/optimizer.h"
#include "optim/data_parallel.h"
#include "pipeline/timeline.h"
#include "train/loop/batch_source.h"
#include "train/checkpoint/checkpoint_state.h"
#include "train/observe/metrics.h"
#include "train/loop/step_runner.h"

namespace baton {

// Uniform random token ids in [0, vocab) from (seed, step, row, position): `baton bench`'s data,
// no dataset or tokenizer needed.
class SyntheticTokens final : public BatchSource {
 public:
  SyntheticTokens(int vocab, int seq_len, uint64_t seed) : vocab_(vocab), T_(seq_len), seed_(seed) {}
  void train_rows(int64_t step, int row, int n, HostBatch& out) const override;
  std::string describe() const override;

 private:
  int vocab_, T_;
  uint64_t seed_;
};

// The model a config describes (a GPT today; the vocabulary from model.vocab_size or the
// tokenizer's `tokenizer_vocab`), checked against the tensor-parallel split. Throws Error.
std::shared_ptr<const ModelBuilder> model_builder(const Config& cfg, int tokenizer_vocab);

// The Layout of a config for `world_size` ranks: tp, the homogeneous grid of dp pipelines of pp
// stages (vp chunks each), parallel.stages or the model's default split, parallel.replicas; or the
// virtual workers of hetero.virtual_workers (one per rank when the list is empty), each a group
// with its own stages (given layers or the model's even split over them) on the ranks it lists.
// Throws Error (with a hint) — the same on every rank, before any collective.
dist::Layout layout_from_config(const Config& cfg, int world_size, const ModelBuilder& model);

// What can be checked of a training config before any collective, the same on every rank: this
// build trains it (check_trainable), its model exists (the tokenizer's vocabulary when
// model.vocab_size = 0), and its layout fits the model and `world_size` ranks. Throws Error.
void training_preflight(const Config& cfg, int world_size);

// One optimizer step as the session ran it: the step's result, its wall time (after the device
// synchronized) and how much of that this rank spent blocked in communication.
struct TimedStep {
  StepResult result;
  double seconds = 0;
  double comm_seconds = 0;
};

struct SessionOptions {
  bool record_instructions = false;  // keep each step's executed instructions (tests)
  UpdateHooks* hooks = nullptr;      // a virtual worker's WSP (train/hetero/wsp_stage.h)
  MemoryLimit memory_limit;          // an emulated device's memory (config/device_emulation.h); 0 = none
  bool op_times = false;             // time every backend op (OpTimedBackend; baton bench's BATON_OP_TIMES)
};

class TrainSession {
 public:
  // `world`: every rank of the job. Collective: builds the process groups. Throws baton::Error
  // for a config this build cannot train.
  TrainSession(const Config& cfg, dist::Comm& world, std::shared_ptr<const ModelBuilder> builder,
               std::unique_ptr<BatchSource> data, SessionOptions options = {});
  ~TrainSession();
  TrainSession(const TrainSession&) = delete;
  TrainSession& operator=(const TrainSession&) = delete;

  // The log header: device and layout, pipeline, model, data, memory and FLOPs (collective: sums
  // the parameter count over the job).
  void log_header();
  // Restores the newest (or the configured) checkpoint and logs it; returns the step to start at,
  // or nullopt when nothing was resumed. Refuses checkpoints newer than that step. Collective.
  std::optional<int64_t> resume();
  TimedStep step(int64_t step, double lr);
  // Mean validation loss (cfg.train.eval_steps batches, or `batches`); nullopt without a
  // validation set.
  std::optional<EvalResult> evaluate(int batches = 0);
  // Distinct validation samples (0: unknown or none); batches hold train.global_batch of them.
  int64_t valid_samples() const { return data_->valid_samples(); }
  // model.init_from (a run that resumed no checkpoint): loads every rank's shards of the weights
  // it names ("hf:DIR", a Hugging Face GPT-2 directory: train/checkpoint/hf_gpt2.h) over the
  // random initialisation, after checking DIR's config.json against the model and the tokenizer's
  // vocabulary; the optimizer state stays zero. Returns false when the key is empty. Collective:
  // a problem on any rank is one AgreedError on all.
  bool init_from_pretrained();
  // Loads the weights (and the rest of the training state) of checkpoint file `path`, whatever
  // else checkpoint.dir holds; returns its metadata. Collective. `baton eval`.
  CheckpointMeta load(const std::string& path);
  // Writes the checkpoint of `step` and logs its size and time; returns its path. Collective.
  // The file carries the data offset and the divergence guard's history set below.
  std::string save(int64_t step, double lr);
  // The divergence guard's history for the next save; the one the resumed checkpoint carried.
  void set_guard_state(std::string state) { guard_state_ = std::move(state); }
  const std::string& resumed_guard_state() const { return resumed_guard_state_; }
  // train.on_spike = "rewind": loads checkpoint `path` and goes on with data step `next_data_step`
  // at the checkpoint's step (the data position runs ahead of the step by the batches skipped, from
  // now on and in every later checkpoint); returns the checkpoint's metadata. Collective.
  CheckpointMeta rewind(const std::string& path, int64_t next_data_step);
  // Batches the data position runs ahead of the step (the sum of the rewinds' skips).
  int64_t data_offset() const { return data_offset_; }
  // True when the state is a consistent checkpoint: always, except for an asynchronous pipeline
  // between its drain points.
  bool checkpointable() const;
  // Per-step metrics of a timed step (throughput over the whole job's samples).
  StepMetrics metrics(int64_t step, double lr, const TimedStep& t) const;
  // Whether any rank that steps in lockstep with this one got SIGINT/SIGTERM (collective over the
  // world; homogeneous layouts), so that all stop after the same step.
  bool stop_requested_anywhere() const;
  // run.trace: gathers every rank's timeline into <run.dir>/trace.json beside the simulator's
  // prediction (train/observe/run_trace.h) and logs how to open it; returns its path on rank 0 ("" on the
  // others, without run.trace, or when no step was recorded). Collective.
  std::string write_trace();

  const Config& config() const { return cfg_; }
  const ModelBuilder& builder() const { return *builder_; }
  SequentialModel& model() { return *model_; }
  Backend& backend() { return *choice_.backend; }
  // The op-time table's backend (BATON_OP_TIMES=1), else null.
  OpTimedBackend* op_times() { return op_times_; }
  const BackendChoice& device() const { return choice_; }
  const dist::Layout& layout() const { return layout_; }
  const dist::ProcessGroups& groups() const { return groups_; }
  const StepRunner& runner() const { return *runner_; }
  pipeline::Timeline* timeline() { return timeline_.get(); }
  // The schedule this rank's group runs (parallel.schedule; a virtual worker's: hetpipe, or 1f1b
  // for one stage).
  const std::string& schedule() const { return schedule_; }
  // This rank's group: every rank of its pipeline (a VW's ranks, or a data-parallel replica's).
  dist::Comm& group() const { return *groups_.group; }
  // The ranks that write one checkpoint file together: the job, or this rank's VW.
  dist::Comm& file_comm() const { return layout_.virtual_workers() ? *groups_.group : world_; }
  dist::Comm& world() const { return world_; }
  int world_size() const { return world_.size(); }
  bool rank0() const { return world_.rank() == 0; }
  // Model FLOPs of one optimizer step of the whole job and the device's peak TFLOP/s for the
  // compute dtype (0 when unknown).
  double flops_per_step() const { return flops_; }
  double peak_tflops() const { return peak_; }
  // Positions (tokens of a GPT) per step: the job's (homogeneous layouts), or this rank's virtual
  // worker's, whose steps are its own.
  int64_t tokens_per_step() const { return int64_t(step_rows_) * builder_->max_positions(); }
  // Samples per step over what steps together (the job, or this rank's VW), and their ranks.
  int step_rows() const { return step_rows_; }
  int step_ranks() const { return step_ranks_; }
  // Where this rank's checkpoint files go: checkpoint.dir, or its VW's <checkpoint.dir>/vw<k>.
  std::string checkpoint_dir() const { return shard_layout_.dir; }
  // A checkpoint's size: the job's parameters (known after log_header) with the optimizer's
  // state tensors per parameter and the buffers, fp32.
  double checkpoint_bytes_estimate() const {
    return 4.0 * (n_params_ * (1.0 + double(opt_states_)) + double(model_->table().buffers_total()));
  }

  // Settings that differ from the resumed checkpoint's config (none before resume()).
  const std::vector<ConfigChange>& resume_changes() const { return resume_changes_; }

 private:
  HostTrainState& host();
  static void refuse_model_changes(const std::string& saved, const std::string& now, const std::string& path);
  std::vector<ConfigChange> resume_changes_;
  double n_params_ = 0;
  size_t opt_states_ = 0;  // state tensors per parameter (AdamW 2, SGD with momentum 1)
  int64_t resumed_at_ = -1;
  int64_t data_offset_ = 0;  // data step = optimizer step + this (rewinds skip batches)
  std::string guard_state_, resumed_guard_state_;

  Config cfg_;
  dist::Comm& world_;
  std::shared_ptr<const ModelBuilder> builder_;
  dist::Layout layout_;
  // Declared in destruction order (reverse): the communicators go before the backend whose stream
  // they order against.
  BackendChoice choice_;
  std::unique_ptr<dist::Comm> device_world_;  // GPU runs: NCCL + MPI, split into groups_
  dist::ProcessGroups groups_;
  std::string schedule_;
  int step_rows_ = 0, step_ranks_ = 1;
  std::unique_ptr<BatchSource> data_;
  TensorParallel tpc_;
  std::unique_ptr<SequentialModel> model_;
  std::unique_ptr<DataParallelGrads> dpg_;
  std::unique_ptr<Optimizer> opt_;
  std::unique_ptr<HostTrainState> host_;
  ShardLayout shard_layout_;
  BatchFn batch_;
  std::unique_ptr<StepRunner> runner_;
  // run.trace (null when off): this rank's timeline, its clock's origin (a barrier's exit on every
  // rank, so the ranks' timelines line up).
  std::unique_ptr<pipeline::Timeline> timeline_;
  double trace_origin_ = 0;
  OpTimedBackend* op_times_ = nullptr;  // choice_.backend, when it is one
  bool memory_logged_ = false;  // the backend's memory summary, once after the first step
  double flops_ = 0, peak_ = 0;
};

}  // namespace baton
