// One rank's training state, built once from (Config, world, token source) and driven step by step:
// process groups, the (tensor- and pipeline-parallel) GPT, bucketed data-parallel gradients, AdamW,
// the pipeline executor for pp > 1, and the checkpoint layout of this rank's shards. `train()`
// (train/trainer.h) drives it with a dataset, metrics and checkpoints; `baton bench` with
// synthetic tokens and nothing written. Every method that communicates must be called on every
// rank of the job in the same order (they are collective), as the trainer's loop does.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/device.h"
#include "config/config.h"
#include "dist/comm.h"
#include "dist/rank_grid.h"
#include "model/gpt_dims.h"
#include "model/gpt_model.h"
#include "optim/adamw.h"
#include "optim/data_parallel.h"
#include "train/checkpoint_state.h"
#include "train/metrics.h"
#include "train/train_step.h"

namespace baton {

class PipelineStep;

// Where a session's tokens come from. Rows are pure functions of their indices, so every rank
// that asks for a row (data-parallel slices, pipeline stages, tensor-parallel peers) gets the same.
class TokenSource {
 public:
  virtual ~TokenSource() = default;
  // Rows [row, row + n) of the global batch of `step`: inputs and targets [n, T].
  virtual void train_rows(int64_t step, int row, int n, int32_t* x, int32_t* y) const = 0;
  virtual bool has_valid() const { return false; }
  // Rows [row, row + n) of validation batch `batch`, batches of `rows` sequences.
  virtual void valid_rows(int batch, int rows, int row, int n, int32_t* x, int32_t* y) const;
  // The header's `data:` line before " | N tokens/step ...".
  virtual std::string describe() const = 0;
  // The header's `baseline:` line (without the prefix); empty: none.
  virtual std::string baseline() const { return {}; }
};

// Uniform random token ids in [0, vocab) from (seed, step, row, position): `baton bench`'s data,
// no dataset or tokenizer needed.
class SyntheticTokens final : public TokenSource {
 public:
  SyntheticTokens(int vocab, int seq_len, uint64_t seed) : vocab_(vocab), T_(seq_len), seed_(seed) {}
  void train_rows(int64_t step, int row, int n, int32_t* x, int32_t* y) const override;
  std::string describe() const override;

 private:
  int vocab_, T_;
  uint64_t seed_;
};

// The config checks every session needs (model and optimizer kinds, precision, schedule, the layout
// against `world_size` ranks); with `needs_dataset` also that data.train is set. Throws
// baton::Error, the same on every rank, before any collective.
void check_trainable(const Config& cfg, int world_size, bool needs_dataset);
// The model's dimensions (vocabulary from model.vocab_size or the tokenizer's `tokenizer_vocab`),
// checked against the tensor-parallel split of the vocabulary.
GptDims session_dims(const Config& cfg, int tokenizer_vocab);

// One optimizer step as the session ran it: the step's result, its wall time (after the device
// synchronized) and how much of that this rank spent blocked in communication.
struct TimedStep {
  StepResult result;
  double seconds = 0;
  double comm_seconds = 0;
};

class TrainSession {
 public:
  // `world`: every rank of the job (null or size 1: one process). Collective: builds the process
  // groups. Throws baton::Error for a config this build cannot train.
  TrainSession(const Config& cfg, dist::Comm* world, int tokenizer_vocab,
               std::unique_ptr<TokenSource> data);
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
  // Mean validation loss (cfg.train.eval_steps batches); nullopt without a validation set.
  std::optional<double> evaluate();
  // Writes the checkpoint of `step` and logs its size and time; returns its path. Collective.
  std::string save(int64_t step, double lr);
  // True when the state is a consistent checkpoint: always, except for an asynchronous pipeline
  // between its drain points.
  bool checkpointable() const;
  // Per-step metrics of a timed step (throughput over the whole job's tokens).
  StepMetrics metrics(int64_t step, double lr, const TimedStep& t) const;
  // Whether any rank got SIGINT/SIGTERM (collective), so that all stop after the same step.
  bool stop_requested_anywhere() const;

  const Config& config() const { return cfg_; }
  const GptDims& dims() const { return dims_; }
  GptModel& model() { return *model_; }
  Backend& backend() { return *choice_.backend; }
  const BackendChoice& device() const { return choice_; }
  dist::Comm* world() const { return world_; }
  int world_size() const { return world_size_; }
  bool rank0() const { return !world_ || world_->rank() == 0; }
  int tp_size() const { return tp_size_; }
  int pp_size() const { return pp_size_; }
  // Model FLOPs of one optimizer step of the whole job (PTD-P formula) and the device's peak
  // TFLOP/s (0 when unknown).
  double flops_per_step() const { return flops_; }
  double peak_tflops() const { return peak_; }
  int64_t tokens_per_step() const { return int64_t(cfg_.train.global_batch) * dims_.seq_len; }
  std::string checkpoint_dir() const { return cfg_.checkpoint_dir(); }

 private:
  HostTrainState& host();

  Config cfg_;
  dist::Comm* world_ = nullptr;
  int world_size_ = 1, tp_size_ = 1, dp_size_ = 1, pp_stages_ = 1, pp_size_ = 1;
  // Declared in destruction order (reverse): the communicators go before the backend whose stream
  // they order against.
  BackendChoice choice_;
  std::unique_ptr<dist::Comm> device_world_;  // GPU runs: NCCL + MPI, split into groups_
  dist::ProcessGroups groups_;
  GptDims dims_;
  std::unique_ptr<TokenSource> data_;
  TensorParallel tpc_;
  dist::Comm* dp_comm_ = nullptr;
  std::unique_ptr<GptModel> model_;
  std::unique_ptr<DataParallelGrads> dpg_;
  bool wte_copy_ = false;
  std::unique_ptr<AdamW> opt_;
  std::unique_ptr<HostTrainState> host_;
  ShardLayout shard_layout_;
  StepSetup setup_;
  BatchRows batch_;
  std::unique_ptr<dist::Comm> embedding_group_;
  std::unique_ptr<PipelineStep> pipe_;
  bool async_pipe_ = false;
  bool memory_logged_ = false;  // the backend's memory summary, once after the first step
  double flops_ = 0, peak_ = 0;
};

}  // namespace baton
