// One optimizer step of a pipeline-parallel GPT (pp > 1), combined with tensor and data
// parallelism: the flush schedule's program for this pipeline rank (generate -> lower -> validate,
// DESIGN §4) run by the executor over a GptModel that holds this rank's chunks, then — at the
// step's REDUCE_GRADS / OPT_STEP — the sequence-parallel gradient sums, the tied-embedding
// gradient sum between the first and last stage (Megatron's embedding group), the data-parallel
// reduction (all buckets launched at the flush: no overlap with backward under pp > 1), the global
// norm over tp × dp × pp (each parameter counted once), clipping and AdamW. Gives the single-process
// update W(t+1) = W(t) − lr·∇f(W(t)) (notes-dissertation §1.5, §1.6). Shared by the trainer and the
// layout-invariance test.
//
// Asynchronous kinds (docs/schedules.md "Asynchronous kinds in training"):
// - `2bw` (PipeDream-2BW, notes-dissertation §1.4): a step is one batch of m micro-batches per
//   stage and one optimizer update per stage; batch n is computed on W(n − 1) (two versions live):
//   W(n+1) = W(n) − lr·∇f(W(n − 1)).
// - `pipedream` (notes-dissertation §1.3, notes-pipedream §1): a step is the same global batch
//   (m micro-batches per stage), but every micro-batch's backward is followed by its stage's own
//   optimizer update (m updates per step, each with the step's LR); stage s reads the stashed
//   W_s(k − p + s + 1) for micro-batch k (W(k − p + 1) on every stage with vertical sync). The
//   step's loss and grad norm are the means over its m updates.
// - `pipedream` with replicated stages (1F1B-RR, PipeDream §3.2 / notes-pipedream §1;
//   `replicas`): stage s runs on r_s consecutive ranks of the pipeline group, micro-batch k on
//   replica k mod r_s (deterministic round-robin by id). Each replica updates after each of its
//   backwards, the r_s replicas together (REDUCE_GRADS sums their gradients), so update n of stage
//   s applies the summed gradients of micro-batches (n − 1)·r_s .. n·r_s − 1, and stage s computes
//   micro-batch k on W_s(max(⌊k/r_s⌋ − a_s + 1, 0)), a_s = ⌈(r_s + … + r_{p−1}) / r_s⌉ its
//   in-flight count (NOAM for s = 0). Stages update at different rates, so clipping is per stage
//   (the stage's own gradient norm; no collective across stages at an update), and the step's loss
//   (per token over the global batch) and grad norm (√Σ_s mean over the stage's updates of its
//   squared norm) are combined once per step. The tied wte needs r_0 = r_{p−1}: replica j of the
//   first stage and replica j of the last sum their (replica-summed) copies at every update.
//   Needs tp = dp = 1 (the replicas are the data parallelism here).
// The program runs without flushes over a *segment* of steps, drained (no micro-batch in flight)
// at multiples of `drain_every` and at `total_steps`: checkpoints are taken there, so a resumed run
// repeats an uninterrupted one exactly. Each update uses the global grad norm (a blocking
// collective over the whole model at every update), and the tied wte's two copies (first and
// last stage) sum their gradients at each update, so they stay identical version by version.
// Weight versions are a ring of parameter buffers (Executor::weight_versions() of them); after
// each step the latest version is copied to model.params() (what checkpoints, evaluation and
// sampling read).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "pipeline/executor.h"
#include "train/train_step.h"

namespace baton {

struct PipelineSetup {
  StepSetup step;              // model (this rank's chunks), optimizer, grads, tp, dp, batch shape
  dist::Comm* pp = nullptr;    // the pipeline group (size pp), rank = pipeline stage
  dist::Comm* embedding = nullptr;  // first + last pipeline stage (tied wte); null elsewhere
  int vp = 1;
  std::string schedule = "1f1b";
  // PTD-P scatter/gather (notes-dissertation §3): send 1/tp of each boundary tensor per tp rank
  // and all-gather on receipt. Needs tp > 1 and no sequence parallelism.
  bool scatter_gather = false;
  bool vertical_sync = false;  // pipedream only
  // pipedream only (1F1B-RR): ranks per pipeline stage, summing to pp->size(); empty = one each.
  // The model holds the chunk of stage stage_of_rank(replicas, pp->rank()).
  std::vector<int> replicas;
  // Asynchronous kinds: the run's last step (exclusive) and the drain period (0 = only at the end).
  int64_t total_steps = 0;
  int64_t drain_every = 0;
};

// pipedream and 2bw: no flush, weight versions (the executor's run_until_update).
bool is_async_schedule(const std::string& kind);

// The ranks of `pp` that share the tied wte (pipeline ranks 0 and pp − 1) as one group; every
// other rank gets a group of its own (returned as null). Collective over `pp`.
// With replicated stages (1F1B-RR, `replicas` non-empty, r_0 = r_{p−1} required): replica j of
// the first stage and replica j of the last form group j.
std::unique_ptr<dist::Comm> make_embedding_group(dist::Comm& pp, const std::vector<int>& replicas = {});
// The pipeline stage that rank `rank` of the pipeline group runs (rank itself without replication).
int stage_of_rank(const std::vector<int>& replicas, int rank);
// The pipeline-group rank of replica 0 of `stage` (`stage` itself without replication).
int stage_first_rank(const std::vector<int>& replicas, int stage);

class PipelineStep {
 public:
  // Generates and checks the schedule for global_batch / (micro_batch · dp) micro-batches, and
  // reserves the model's activation slots (simulate's peak for this rank). Throws Error for a
  // schedule that does not fit (e.g. interleaved with micro-batches not a multiple of pp).
  explicit PipelineStep(const PipelineSetup& setup);
  ~PipelineStep();
  PipelineStep(const PipelineStep&) = delete;
  PipelineStep& operator=(const PipelineStep&) = delete;

  StepResult step(const BatchRows& batch, int64_t step, double lr);
  // Asynchronous kinds: true when no micro-batch is in flight (between segments); flush kinds:
  // always. Checkpoints are only consistent when drained.
  bool drained() const;
  // Weight versions this rank keeps (1 for flush kinds).
  int weight_versions() const;
  // Mean loss over `batches` batches of `rows` sequences (forward only), from `rows_fn(b, row, n,
  // x, y)`; the same on every rank.
  double evaluate(const BatchRows& rows_fn, int batches, int rows);

  int microbatches() const { return microbatches_; }
  int slots() const;
  const pipeline::Executor& executor() const { return *executor_; }
  const pipeline::ExecStats& last_stats() const { return stats_; }

 private:
  class GptStage;
  void start_segment(int64_t step);
  pipeline::ScheduleSpec spec_for(int steps) const;

  PipelineSetup s_;
  int microbatches_ = 0;
  bool async_ = false;
  int64_t segment_start_ = 0, next_step_ = 0;
  std::unique_ptr<dist::Comm> eval_comm_;  // asynchronous kinds: evaluation's own communicator
  std::unique_ptr<dist::Comm> replica_comm_;  // 1F1B-RR: the replicas of this rank's stage
  int stages_ = 0;                 // pipeline stages (pp->size() without replication)
  int my_stage_ = 0, my_replica_ = 0;
  int updates_per_step_ = 1;       // this rank's OPT_STEPs per trainer step (asynchronous kinds)
  std::unique_ptr<pipeline::Executor> executor_;
  std::unique_ptr<GptStage> stage_;
  pipeline::ExecStats stats_;
};

}  // namespace baton
