// StepRunner: one optimizer step (or, for the asynchronous kinds, one trainer step's share of a
// longer program) of any model under any homogeneous layout — tensor, data and pipeline
// parallelism, pp = 1 included — through the one path DESIGN §4 describes: the schedule's
// program for this rank (generate -> lower -> validate), run by the executor over a ModelStage,
// with GradSync doing the reductions and the optimizer stepping at the program's OPT_STEP. Shared
// by the trainer, `baton bench` and the invariance and semantics tests, so all run the same step.
//
// Update rules (the schedule's traits; docs/schedules.md):
// - FLUSH (gpipe, 1f1b, interleaved, zb-h1; pp = 1 runs as a one-stage 1f1b program): a step is
//   one batch; W(t+1) = W(t) − lr·∇f(W(t)) (notes-dissertation §1.2, §1.5, §1.6; Qi et al.).
// - PER_BATCH (2bw, PipeDream-2BW, notes-dissertation §1.4): a step is one batch of m
//   micro-batches per stage and one update per stage; batch n is computed on W(n − 1):
//   W(n+1) = W(n) − lr·∇f(W(n − 1)).
// - PER_MICROBATCH (pipedream, notes-dissertation §1.3, notes-pipedream §1): a step is the same
//   global batch (m micro-batches per stage), every micro-batch's backward followed by its stage's
//   own update (m updates per step, each with the step's LR); stage s reads the stashed
//   W_s(k − p + s + 1) for micro-batch k (W(k − p + 1) on every stage with vertical sync). The
//   step's loss and grad norm are the means over its m updates. With replicated stages (1F1B-RR,
//   PipeDream §3.2) stage s runs on r_s ranks, micro-batch k on replica k mod r_s; the replicas
//   update together with their summed gradients, so stage s computes micro-batch k on
//   W_s(max(⌊k/r_s⌋ − a_s + 1, 0)), a_s = ⌈(r_s + … + r_{p−1}) / r_s⌉. Stages update at different
//   rates, so clipping is per stage (GradSync), and the step's loss (per term over the global
//   batch) and grad norm (√Σ_s mean over the stage's updates of its squared norm) are combined
//   once per step. Needs tp = dp = 1 (the replicas are the data parallelism).
// The asynchronous programs run without flushes over a *segment* of steps, drained at multiples of
// `drain_every` and at `total_steps`: checkpoints are taken there, so a resumed run repeats an
// uninterrupted one exactly. After each step the latest weight version becomes the model's
// parameters (checkpoints, evaluation and sampling read them).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/timer.h"
#include "dist/layout.h"
#include "dist/process_groups.h"
#include "model/sequential_model.h"
#include "optim/optimizer.h"
#include "optim/data_parallel.h"
#include "pipeline/executor.h"
#include "pipeline/instr.h"
#include "train/loop/batch_source.h"
#include "train/loop/buffer_sync.h"
#include "train/loop/grad_sync.h"
#include "train/loop/model_stage.h"
#include "train/loop/weight_versions.h"

namespace baton {

// The points of a virtual worker's step where a cross-group synchronisation (HetPipe's WSP,
// train/hetero/wsp_stage.h) talks to its parameter server: before this rank's forward of a minibatch (a
// pull may gate it) and after each of its updates (a wave's last pushes). Minibatches and updates
// are numbered from 1 over the run, one update per minibatch and stage: a VW of several stages
// runs the asynchronous per-microbatch `hetpipe` program (one micro-batch per minibatch); a VW of
// one stage a flush program per minibatch (its micro-batches accumulate: every minibatch reads the
// latest weights). `versions` is this rank's weight stash, whose version v is update `base` + v
// (the stash restarts at every drained segment, train.checkpoint.every), or null under a flush
// program: then the model's parameters hold the latest update.
class UpdateHooks {
 public:
  virtual ~UpdateHooks() = default;
  // `reads`: the update whose weights the minibatch computes on (its version).
  virtual void before_forward(int64_t minibatch, int64_t reads, WeightVersions* versions, int64_t base) = 0;
  virtual void after_update(int64_t update, WeightVersions* versions, int64_t base) = 0;
  // After this rank's forward or backward of `minibatch`, which took `seconds` (an emulated slower
  // device stretches it: train/hetero/compute_stretch.h).
  virtual void after_compute(int64_t /*minibatch*/, WorkTime /*t*/) {}
  // The run's last minibatch as this rank now knows it, when a stop moved it earlier than
  // train.steps (WSP's agreed stop): the runner cuts its asynchronous program there, so that the
  // pipeline drains at that minibatch (Executor::retarget). Asked after each before_forward.
  virtual std::optional<int64_t> end_at() const { return std::nullopt; }
  // Whether this rank's forward of `minibatch` could start now without waiting for the server
  // (asked, never blocking, before a forward when reorders()); and whether the pipelined program
  // may run backwards while a forward waits (pipeline::ExecOptions::backwards_while_waiting).
  virtual bool forward_ready(int64_t /*minibatch*/) { return true; }
  virtual bool reorders() const { return false; }
};

struct StepRunnerSetup {
  SequentialModel* model = nullptr;  // this rank's chunks (Layout::place(rank).chunks)
  Optimizer* optimizer = nullptr;
  DataParallelGrads* grads = nullptr;
  const dist::Layout* layout = nullptr;
  int rank = 0;                            // this rank's world rank in `layout`
  dist::ProcessGroups* groups = nullptr;   // made from `layout` (pp must exist)
  std::string schedule = "1f1b";
  bool scatter_gather = false;  // PTD-P scatter/gather (tp > 1, no sequence parallelism)
  bool vertical_sync = false;   // pipedream
  int nm = 0;                   // hetpipe: minibatches in flight (0 = pp)
  UpdateHooks* hooks = nullptr; // a virtual worker: WSP's pushes and pulls (hetpipe, or a one-stage flush kind)
  // Samples per step over every data-parallel group; a virtual worker's own (its rows of the job's
  // global batch: rows [group · global_batch, (group + 1) · global_batch) of the data's step).
  int global_batch = 1;
  int micro_batch = 1;
  int T = 1;                    // positions per sample
  double grad_clip = 0;
  // Asynchronous kinds: the run's last step (exclusive) and the drain period (0 = only at the end).
  int64_t total_steps = 0;
  int64_t drain_every = 0;
  bool record = false;          // keep the executed instructions (last_stats().trace)
  pipeline::Timeline* timeline = nullptr;  // run.trace: every instruction with its wall-clock span
};

// An evaluation: the mean loss per loss term, and each of the model's metrics
// (ModelBuilder::metric_names, e.g. top-1 / top-5 accuracy) as its mean per sample.
struct EvalResult {
  double loss = 0;
  std::vector<double> metrics;
};

struct StepResult {
  double loss = 0;       // mean per loss term over the global batch
  double grad_norm = 0;  // before clipping
  int buckets_early = 0;  // this rank's data-parallel buckets (last update) overlapped with backward
};

class StepRunner {
 public:
  // Generates and checks the schedule for global_batch / (micro_batch · dp) micro-batches per
  // pipeline, and reserves the model's activation slots (simulate's peak for this rank).
  explicit StepRunner(const StepRunnerSetup& setup);
  ~StepRunner();
  StepRunner(const StepRunner&) = delete;
  StepRunner& operator=(const StepRunner&) = delete;

  StepResult step(const BatchFn& batch, int64_t step, double lr);
  // Mean loss per term over `batches` batches of `rows` samples (forward only), from `rows_fn`;
  // the same on every rank.
  EvalResult evaluate(const BatchFn& rows_fn, int batches, int rows);
  // Asynchronous kinds: true when no micro-batch is in flight (between segments); flush kinds:
  // always. Checkpoints are only consistent when drained.
  bool drained() const;
  // Weight versions this rank keeps (1 for flush kinds).
  int weight_versions() const;

  int microbatches() const { return microbatches_; }
  int slots() const { return s_.model->num_slots(); }
  const pipeline::Executor& executor() const { return *executor_; }
  const pipeline::ExecStats& last_stats() const { return stats_; }
  const pipeline::ScheduleTraits& traits() const { return *traits_; }

 private:
  pipeline::Program program(int steps) const;
  pipeline::ExecOptions exec_options() const;
  void start_segment(int64_t step);
  // A hook moved the run's end into the segment: the program ends there (Executor::retarget).
  void cut_segment(int64_t end);
  void on_update(int version, const UpdateStats& u);

  StepRunnerSetup s_;
  const pipeline::ScheduleTraits* traits_ = nullptr;
  const dist::RankPlace* place_ = nullptr;
  const dist::PipelineSpec* pipe_ = nullptr;
  int microbatches_ = 0, dp_ = 1;
  int updates_per_step_ = 1;  // this rank's updates per trainer step (asynchronous kinds)
  std::vector<int> tied_stages_;
  std::unique_ptr<dist::Comm> eval_comm_;  // asynchronous kinds: evaluation's own communicator
  std::unique_ptr<GradSync> sync_;
  std::unique_ptr<BufferSync> buffers_;
  std::unique_ptr<WeightVersions> versions_;
  std::unique_ptr<ModelStage> stage_;
  std::unique_ptr<pipeline::Executor> executor_;
  pipeline::ExecStats stats_;
  // The current run: its LR and trainer step, and the updates it made.
  double lr_ = 0;
  int64_t step_ = 0, segment_start_ = 0, segment_end_ = 0, next_step_ = 0;
  bool reorder_ = false;  // backwards may run while a forward waits (UpdateHooks::reorders)
  int updates_ = 0;
  double sum_loss_ = 0, sum_norm_ = 0, sum_own_sumsq_ = 0, loss_sum_ = 0;
  int buckets_early_ = 0;
};

}  // namespace baton
