// One optimizer step of a pipeline-parallel GPT (pp > 1), combined with tensor and data
// parallelism: the flush schedule's program for this pipeline rank (generate -> lower -> validate,
// DESIGN §4) run by the executor over a GptModel that holds this rank's chunks, then — at the
// step's REDUCE_GRADS / OPT_STEP — the sequence-parallel gradient sums, the tied-embedding
// gradient sum between the first and last stage (Megatron's embedding group), the data-parallel
// reduction (all buckets launched at the flush: no overlap with backward under pp > 1), the global
// norm over tp × dp × pp (each parameter counted once), clipping and AdamW. Gives the single-process
// update W(t+1) = W(t) − lr·∇f(W(t)) (notes-dissertation §1.5, §1.6). Shared by the trainer and the
// layout-invariance test.
#pragma once
#include <memory>
#include <string>

#include "pipeline/executor.h"
#include "train/train_step.h"

namespace baton {

struct PipelineSetup {
  StepSetup step;              // model (this rank's chunks), optimizer, grads, tp, dp, batch shape
  dist::Comm* pp = nullptr;    // the pipeline group (size pp), rank = pipeline stage
  dist::Comm* embedding = nullptr;  // first + last pipeline stage (tied wte); null elsewhere
  int vp = 1;
  std::string schedule = "1f1b";
};

// The ranks of `pp` that share the tied wte (pipeline ranks 0 and pp − 1) as one group; every
// other rank gets a group of its own (returned as null). Collective over `pp`.
std::unique_ptr<dist::Comm> make_embedding_group(dist::Comm& pp);

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
  // Mean loss over `batches` batches of `rows` sequences (forward only), from `rows_fn(b, row, n,
  // x, y)`; the same on every rank.
  double evaluate(const BatchRows& rows_fn, int batches, int rows);

  int microbatches() const { return microbatches_; }
  int slots() const;
  const pipeline::Executor& executor() const { return *executor_; }
  const pipeline::ExecStats& last_stats() const { return stats_; }

 private:
  class GptStage;
  PipelineSetup s_;
  int microbatches_ = 0;
  std::unique_ptr<pipeline::Executor> executor_;
  std::unique_ptr<GptStage> stage_;
  pipeline::ExecStats stats_;
};

}  // namespace baton
