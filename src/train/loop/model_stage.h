// ModelStage: the pipeline executor's view of this rank's SequentialModel (DESIGN §2: the
// executor never sees a model). It loads micro-batches into slots, runs the chunks' forwards and
// backwards, exposes the slots' boundary buffers, selects the weight version an instruction names
// (asynchronous kinds), reports each layer's last backward before an update to GradSync (so
// data-parallel buckets launch while the backward goes on), and runs REDUCE_TIED / REDUCE_GRADS
// through GradSync. OPT_STEP is handed to the runner's update callback (the optimizer and the
// update rule's bookkeeping are the runner's).
//
// The rank's model stages come from the Layout (RankPlace::model_stages; chunk c of pipeline
// stage r is model stage c·pp + r, PTD-P §1.6): model stage model_stages[c] is the model's chunk c.
// Program micro-batch k is samples row0 + (k mod per_batch)·micro of batch first_batch + k /
// per_batch.
#pragma once
#include <cstdint>
#include <functional>
#include <set>
#include <utility>
#include <vector>

#include "core/timer.h"
#include "model/sequential_model.h"
#include "pipeline/executor.h"
#include "train/loop/batch_source.h"
#include "train/loop/grad_sync.h"
#include "train/loop/weight_versions.h"

namespace baton {

struct StageWork {
  const BatchFn* batch = nullptr;
  int64_t first_batch = 0;
  int per_batch = 1;  // micro-batches per batch (per pipeline)
  int row0 = 0;       // this pipeline's first sample of each batch
  int micro = 1;      // samples per micro-batch
  int T = 1;          // positions per sample
  bool training = true;
  float loss_scale = 0;
};

class ModelStage final : public pipeline::Stage {
 public:
  // Called at OPT_STEP with the update's version and the stats of its REDUCE_GRADS.
  using UpdateFn = std::function<void(int version, const UpdateStats& stats)>;

  // `model_stages`: the model stages of this rank, ascending (one per model chunk); `versions`:
  // the weight stash (asynchronous kinds; null = the model's current weights).
  ModelStage(SequentialModel& model, std::vector<int> model_stages, GradSync& sync,
             WeightVersions* versions, UpdateFn on_update);

  // Called before each training forward of one of this rank's stages, after its weight version
  // (the Instr's; -1 for flush kinds) was selected (WSP's pulls in a pipelined virtual worker:
  // train/hetero/wsp_stage.h).
  void set_forward_ready(std::function<bool(int stage, int microbatch)> fn) { forward_ready_ = std::move(fn); }
  bool forward_ready(int stage, int microbatch) override {
    return !forward_ready_ || !w_.training || forward_ready_(stage, microbatch);
  }
  void set_before_forward(std::function<void(int stage, int microbatch, int version)> fn) {
    before_forward_ = std::move(fn);
  }
  // Called after each training forward and backward with its wall time (seconds).
  void set_after_compute(std::function<void(int microbatch, WorkTime t)> fn) { after_compute_ = std::move(fn); }
  void set_work(const StageWork& w) { w_ = w; }
  const StageWork& work() const { return w_; }
  // The instructions this rank will run: each stage's last backward before an update completes
  // its layers' gradients for that update (computed from the list, so it holds for every kind).
  void set_program(const std::vector<pipeline::Instr>& list);
  // The update of `update` (1-based trainer step) names it in errors.
  void set_update_label(int64_t step) { step_label_ = step; }
  // Evaluation in the middle of an asynchronous segment: the training forwards' loss sum so far is
  // moved off the device first, so that it still counts for its update.
  void hold_loss() { held_loss_ += m_.take_loss_sum(); }
  int64_t update_label() const { return step_label_; }

  size_t boundary_count(int boundary) const override;
  DType boundary_dtype() const override { return m_.act_dtype(); }
  void* input(int, int slot) override { return m_.slot_input(slot); }
  void* output(int stage, int slot) override { return m_.chunk_output(chunk(stage), slot); }
  void* output_grad(int, int slot) override { return m_.slot_output_grad(slot); }
  void* input_grad(int, int slot) override { return m_.slot_input_grad(slot); }
  void load(int stage, int microbatch, int slot) override;
  void forward(int stage, int microbatch, int slot) override;
  void backward(int stage, int microbatch, int slot, pipeline::BackwardPart part) override;
  void reduce_tied(int stage) override;
  void reduce_grads(int stage) override;
  void optimizer_step(int stage, int weight_version) override;
  void select_version(int stage, int weight_version) override;

 private:
  int chunk(int stage) const;  // -1 when this rank does not hold `stage`
  // (batch, first row) of program micro-batch `microbatch`.
  std::pair<int64_t, int> origin(int microbatch) const;
  SequentialModel& m_;
  std::vector<int> stages_;
  GradSync& sync_;
  WeightVersions* versions_;
  UpdateFn on_update_;
  std::function<void(int, int, int)> before_forward_;
  std::function<bool(int, int)> forward_ready_;
  int selected_version_ = -1;  // the last select_version()'s
  std::function<void(int, WorkTime)> after_compute_;
  StageWork w_;
  HostBatch batch_;
  std::set<std::pair<int, int>> last_before_update_;  // (stage, microbatch)
  UpdateStats pending_;
  double held_loss_ = 0;
  int64_t step_label_ = 0;
};

}  // namespace baton
