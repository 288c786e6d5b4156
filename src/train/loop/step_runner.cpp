// StepRunner: the one step path; see step_runner.h.
#include "train/loop/step_runner.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/conv_unit.h"
#include "pipeline/lower.h"
#include "pipeline/schedules.h"
#include "pipeline/stage_memory.h"

namespace baton {

StepRunner::StepRunner(const StepRunnerSetup& setup) : s_(setup) {
  BATON_ASSERT(s_.model && s_.optimizer && s_.grads && s_.layout && s_.groups && s_.groups->pp,
               "incomplete step runner setup");
  traits_ = &pipeline::schedule_traits(s_.schedule);
  BATON_ASSERT(traits_->executable, "schedule {} is not executable", s_.schedule);
  const dist::Layout& layout = *s_.layout;
  place_ = &layout.place(s_.rank);
  pipe_ = &layout.pipeline(place_->group);
  dp_ = layout.dp();
  SequentialModel& model = *s_.model;
  BATON_ASSERT(model.chunks() == place_->chunks, "rank {} holds the wrong chunks", s_.rank);
  BATON_ASSERT(s_.groups->pp->size() == pipe_->ranks() && s_.groups->pp->rank() == place_->pipe_rank,
               "pipeline group of {} ranks for a pipeline of {}", s_.groups->pp->size(), pipe_->ranks());
  microbatches_ = s_.global_batch / (s_.micro_batch * dp_);
  BATON_ASSERT(microbatches_ * s_.micro_batch * dp_ == s_.global_batch,
               "global batch {} does not split into {} groups x micro-batches of {}", s_.global_batch,
               dp_, s_.micro_batch);
  // Model stages holding layers whose parameters another stage also holds (REDUCE_TIED there).
  for (const TiedLayers& t : model.builder().tied_layers()) {
    std::vector<int> holding;
    for (int s = 0; s < static_cast<int>(pipe_->stages.size()); ++s)
      for (int g : t.layers)
        if (pipe_->stages[s].contains(g) && !std::count(holding.begin(), holding.end(), s))
          holding.push_back(s);
    if (holding.size() > 1) tied_stages_.insert(tied_stages_.end(), holding.begin(), holding.end());
  }
  const bool replicated = !pipe_->replicas.empty();
  dist::ProcessGroups& g = *s_.groups;
  auto useful = [](dist::Comm* c) { return c && c->size() > 1 ? c : nullptr; };
  sync_ = std::make_unique<GradSync>(GradSyncSetup{
      .model = &model, .grads = s_.grads, .tp = useful(g.tp.get()), .dp = useful(g.dp.get()),
      .pp = replicated ? nullptr : useful(g.pp.get()), .tied = useful(g.tied.get()),
      .replica = replicated ? g.replica.get() : nullptr, .grad_clip = s_.grad_clip});
  buffers_ = std::make_unique<BufferSync>(model, useful(g.dp.get()), replicated ? useful(g.replica.get()) : nullptr,
                                          traits_->synchronous(), microbatches_, kBatchNormMomentum);
  if (!traits_->synchronous()) versions_ = std::make_unique<WeightVersions>(model);
  stage_ = std::make_unique<ModelStage>(model, place_->model_stages, *sync_, versions_.get(),
                                        [this](int v, const UpdateStats& u) { on_update(v, u); });
  if (s_.hooks) {
    // A virtual worker (train/hetero/wsp_stage.h): of one stage, a flush program per minibatch; of several,
    // hetpipe with one micro-batch per minibatch. Either way one update per minibatch and stage.
    const bool one_stage = traits_->synchronous() && pipe_->ranks() == 1 && dp_ == 1;
    const bool pipelined = traits_->update == pipeline::UpdateRule::PER_MICROBATCH && microbatches_ == 1 &&
                           place_->model_stages.size() == 1 && pipe_->replicas.empty();
    BATON_ASSERT(one_stage || pipelined,
                 "update hooks need a one-stage flush program or a per-microbatch kind with one micro-batch per "
                 "step and one stage per rank");
    // Numbers over the run: a segment's micro-batch k is minibatch segment_start_ + k + 1, and its
    // weight version v is update segment_start_ + v (one update per step); a flush step is one minibatch.
    stage_->set_after_compute([this](int microbatch, WorkTime t) {
      s_.hooks->after_compute(traits_->synchronous() ? step_ + 1 : segment_start_ + microbatch + 1, t);
    });
    if (pipelined && s_.hooks->reorders()) {
      reorder_ = true;
      stage_->set_forward_ready(
          [this](int, int microbatch) { return s_.hooks->forward_ready(segment_start_ + microbatch + 1); });
    }
    if (pipelined)
      stage_->set_before_forward([this](int, int microbatch, int version) {
        s_.hooks->before_forward(segment_start_ + microbatch + 1, segment_start_ + version, versions_.get(),
                                 segment_start_);
        if (const std::optional<int64_t> end = s_.hooks->end_at(); end && *end < segment_end_) cut_segment(*end);
      });
  }
  if (traits_->synchronous()) {
    executor_ = std::make_unique<pipeline::Executor>(program(1), place_->pipe_rank, *g.pp, exec_options());
    // Split backward (zb-h1): each slot also keeps the output gradients its BWD_WEIGHT reads.
    model.reserve(s_.micro_batch, s_.T, executor_->slots(), traits_->split_backward);
    stage_->set_program(executor_->instructions());
    return;
  }
  BATON_REQUIRE(s_.total_steps > 0, "asynchronous pipeline without a step count", "set train.steps");
  // A short program of the same kind sizes the activation slots (the in-flight count does not
  // grow with the number of steps); one more slot serves evaluation while a segment is in flight.
  // (hetpipe admits Nm minibatches on its first stage: the probe covers them too.)
  const int probe_steps = static_cast<int>(std::min<int64_t>(s_.total_steps, pipe_->ranks() + 1 + s_.nm));
  pipeline::Executor probe(program(probe_steps), place_->pipe_rank, *g.pp, exec_options());
  model.reserve(s_.micro_batch, s_.T, probe.slots() + pipeline::kEvaluationSlots, traits_->split_backward);
  if (traits_->update == pipeline::UpdateRule::PER_MICROBATCH) {
    const int r = pipe_->replicas_of(place_->stage);
    BATON_ASSERT(microbatches_ % r == 0, "{} micro-batches over {} replicas", microbatches_, r);
    updates_per_step_ = microbatches_ / r;
  }
  // Evaluation runs on replica 0 of every stage (rank = stage in this communicator), apart from
  // the training program's messages.
  eval_comm_ = g.pp->split(place_->replica == 0 ? 0 : 1, place_->pipe_rank);
}

StepRunner::~StepRunner() = default;

pipeline::Program StepRunner::program(int steps) const {
  const pipeline::ScheduleSpec spec{.kind = s_.schedule, .pp = pipe_->pp, .vp = pipe_->vp,
                                    .microbatches = microbatches_, .steps = steps,
                                    .replicas = pipe_->replicas, .vertical_sync = s_.vertical_sync,
                                    .nm = s_.nm};
  return pipeline::lower(pipeline::generate(spec), {.tied_stages = tied_stages_});
}

pipeline::ExecOptions StepRunner::exec_options() const {
  pipeline::ExecOptions o;
  o.record = s_.record;
  o.timeline = s_.timeline;
  o.backwards_while_waiting = reorder_;
  if (s_.scatter_gather) {
    const TensorParallel& tp = s_.model->tp();
    BATON_ASSERT(tp.active() && !tp.sp(), "scatter/gather needs tp > 1 without sequence parallelism");
    o.scatter_gather = tp.comm;
  }
  return o;
}

bool StepRunner::drained() const { return traits_->synchronous() || !executor_ || executor_->finished(); }

int StepRunner::weight_versions() const { return executor_ ? executor_->weight_versions() : 1; }

// Asynchronous kinds: the program from `step` to the next drain point, fresh weight versions.
void StepRunner::start_segment(int64_t step) {
  int64_t end = s_.total_steps;
  if (s_.drain_every > 0) end = std::min(end, (step / s_.drain_every + 1) * s_.drain_every);
  BATON_REQUIRE(step < end, fmt::format("pipeline step {} is past train.steps = {}", step + 1, s_.total_steps),
                "raise train.steps");
  executor_ = std::make_unique<pipeline::Executor>(program(static_cast<int>(end - step)), place_->pipe_rank,
                                                   *s_.groups->pp, exec_options());
  BATON_ASSERT(executor_->slots() < s_.model->num_slots(), "segment needs {} slots, {} reserved",
               executor_->slots(), s_.model->num_slots());
  stage_->set_program(executor_->instructions());
  segment_start_ = next_step_ = step;
  segment_end_ = end;
  versions_->start(executor_->weight_versions());
  s_.model->zero_grads();
}

void StepRunner::cut_segment(int64_t end) {
  BATON_ASSERT(end > segment_start_ && end >= next_step_, "the run's end moved to step {}, before the segment's "
               "step {} already running", end, next_step_ + 1);
  executor_->retarget(program(static_cast<int>(end - segment_start_)));
  segment_end_ = end;
}

void StepRunner::on_update(int version, const UpdateStats& u) {
  SequentialModel& model = *s_.model;
  const ModelBuilder& b = model.builder();
  ++updates_;
  buffers_->update();
  sum_norm_ += u.grad_norm;
  sum_own_sumsq_ += u.own_sumsq;
  loss_sum_ += u.loss_sum;
  buckets_early_ = u.buckets_early;
  if (traits_->synchronous()) {  // one update per step on the current weights
    s_.optimizer->step(model.params(), model.grads(), lr_, u.clip_scale, step_ + 1);
    s_.grads->gather_params(model.params());
    model.refresh_compute_params();
    if (s_.hooks) s_.hooks->after_update(step_ + 1, nullptr, 0);
    return;
  }
  // Version n = version n − 1 updated with the gradient accumulated since (computed on whichever
  // version the schedule named), into the ring buffer of n; then the gradients restart. AdamW's
  // bias correction counts the updates of earlier segments too.
  float* w = versions_->next(version);
  s_.optimizer->step(w, model.grads(), lr_, u.clip_scale, segment_start_ * updates_per_step_ + version);
  s_.grads->gather_params(w);
  model.zero_grads();
  if (s_.hooks) s_.hooks->after_update(segment_start_ + version, versions_.get(), segment_start_);
  // Samples behind one update: one micro-batch per data-parallel group (pipedream), the global
  // batch (2bw).
  const int rows = traits_->update == pipeline::UpdateRule::PER_MICROBATCH ? s_.micro_batch * dp_
                                                                           : s_.global_batch;
  sum_loss_ += u.loss_sum / double(b.target_elements(rows, s_.T));
}

StepResult StepRunner::step(const BatchFn& batch, int64_t step, double lr) {
  SequentialModel& model = *s_.model;
  const ModelBuilder& b = model.builder();
  const int rows = s_.global_batch / dp_;
  lr_ = lr;
  step_ = step;
  updates_ = 0;
  sum_loss_ = sum_norm_ = sum_own_sumsq_ = loss_sum_ = 0;
  stage_->set_update_label(step + 1);
  const double global_terms = double(b.target_elements(s_.global_batch, s_.T));
  if (traits_->synchronous()) {
    if (s_.hooks) s_.hooks->before_forward(step + 1, step, nullptr, 0);  // the latest weights: updates 1 … step
    model.zero_grads();
    buffers_->begin_step();
    stage_->set_work({.batch = &batch, .first_batch = step, .per_batch = microbatches_,
                      .row0 = place_->group * rows, .micro = s_.micro_batch, .T = s_.T,
                      .training = true, .loss_scale = static_cast<float>(1.0 / global_terms)});
    stats_ = executor_->run(*stage_);
    BATON_ASSERT(updates_ == 1, "the schedule ran {} optimizer steps on this rank", updates_);
    return {.loss = loss_sum_ / global_terms, .grad_norm = sum_norm_, .buckets_early = buckets_early_};
  }
  if (drained()) start_segment(step);
  BATON_ASSERT(step == next_step_, "asynchronous pipeline: step {} after step {}", step + 1, next_step_);
  // d(loss)/d(one loss term) of one update: 2bw averages over the global batch, pipedream over one
  // micro-batch of every data-parallel group (1F1B-RR: each micro-batch's gradient is its own
  // mean, dp = 1; the replicas sum them).
  const int update_rows = traits_->update == pipeline::UpdateRule::PER_MICROBATCH
                              ? s_.micro_batch * dp_ : s_.global_batch;
  stage_->set_work({.batch = &batch, .first_batch = segment_start_, .per_batch = microbatches_,
                    .row0 = place_->group * rows, .micro = s_.micro_batch, .T = s_.T, .training = true,
                    .loss_scale = static_cast<float>(1.0 / double(b.target_elements(update_rows, s_.T)))});
  stats_ = executor_->run_until_update(*stage_, static_cast<int>((step - segment_start_ + 1) * updates_per_step_));
  BATON_ASSERT(updates_ > 0, "the schedule ran no optimizer step on this rank");
  versions_->publish_latest();
  next_step_ = step + 1;
  if (pipe_->replicas.empty())
    return {.loss = sum_loss_ / updates_, .grad_norm = sum_norm_ / updates_, .buckets_early = buckets_early_};
  // 1F1B-RR: the step's statistics, once per step (every rank's portion of the step depends only
  // on the other ranks' portions of the same step, so this collective cannot block the pipeline):
  // loss per term of the global batch (the last stage's replicas hold it), grad norm
  // √Σ_s mean over stage s's updates of its squared norm (replica 0 of each stage contributes).
  double stats[2] = {place_->replica == 0 ? sum_own_sumsq_ / updates_ : 0.0, loss_sum_};
  s_.groups->pp->all_reduce(stats, 2, DType::F64, dist::ReduceOp::SUM);
  return {.loss = stats[1] / global_terms, .grad_norm = std::sqrt(stats[0])};
}

EvalResult StepRunner::evaluate(const BatchFn& rows_fn, int batches, int rows) {
  SequentialModel& model = *s_.model;
  const int mine = rows / dp_;
  // Asynchronous kinds may be mid-segment: evaluate on the latest weights in the spare slot, over
  // a communicator of its own, and leave the training run's state (and its losses) as it was.
  dist::Comm& comm = eval_comm_ ? *eval_comm_ : *s_.groups->pp;
  const int slot = traits_->synchronous() ? 0 : slots() - 1;
  const StageWork saved = stage_->work();
  stage_->hold_loss();
  // sums[0]: the loss; then each metric's per-sample sum.
  std::vector<double> sums(1 + model.builder().metric_names().size(), 0.0);
  for (int b = 0; b < batches; ++b) {
    // Data-parallel groups split each batch; virtual workers each evaluate all of it.
    stage_->set_work({.batch = &rows_fn, .first_batch = b, .per_batch = std::max(1, mine / s_.micro_batch),
                      .row0 = dp_ > 1 ? place_->group * mine : 0, .micro = s_.micro_batch, .T = s_.T,
                      .training = false});
    if (place_->replica == 0)  // 1F1B-RR: replica 0 of each stage (eval_comm_ rank = stage)
      pipeline::run_forward_only(*stage_, comm, pipe_->pp, pipe_->vp, mine / s_.micro_batch, slot);
    sums[0] += model.take_loss_sum();
    const std::vector<double> metrics = model.take_metric_sums();
    for (size_t m = 0; m < metrics.size(); ++m) sums[1 + m] += metrics[m];
  }
  stage_->set_work(saved);
  // The last stage has the losses and metrics.
  s_.groups->pp->all_reduce(sums.data(), sums.size(), dist::DType::F64, dist::ReduceOp::SUM);
  if (s_.groups->dp && s_.groups->dp->size() > 1)
    s_.groups->dp->all_reduce(sums.data(), sums.size(), dist::DType::F64, dist::ReduceOp::SUM);
  EvalResult r;
  r.loss = sums[0] / (double(model.builder().target_elements(rows, s_.T)) * batches);
  for (size_t m = 1; m < sums.size(); ++m) r.metrics.push_back(sums[m] / (double(rows) * batches));
  return r;
}

}  // namespace baton
