// PipelineStep: pipeline schedules over a chunked GptModel; see pipeline_step.h.
#include "train/pipeline_step.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "pipeline/lower.h"
#include "pipeline/schedules.h"

namespace baton {

bool is_async_schedule(const std::string& kind) { return kind == "pipedream" || kind == "2bw"; }

// The executor's view of this rank's GptModel (DESIGN §2: the executor never sees the model).
// Model stage s is chunk s / pp of this rank (chunk c of rank r is stage c·pp + r, PTD-P §1.6).
class PipelineStep::GptStage : public pipeline::Stage {
 public:
  GptStage(const PipelineSetup& s, bool async, int microbatches)
      : s_(s), m_(*s.step.model), pp_(s.pp->size()), async_(async), per_step_(microbatches),
        x_(size_t(s.step.micro_batch) * s.step.seq_len), y_(x_.size()) {}
  ~GptStage() override {
    m_.use_params(nullptr);
    for (float* b : ring_) m_.backend().release(b);
  }

  // What the next run computes. Micro-batch k of the program is rows row0 + (k mod m)·micro_batch
  // of `batch(step + k / m, ...)` (flush programs hold one step: k < m).
  struct Work {
    const BatchRows* batch = nullptr;
    int64_t step = 0;
    int row0 = 0;
    bool training = true;
    float dloss = 0;
    double lr = 0;
    double loss_sum = 0;
  };
  void begin(const BatchRows* batch, int64_t step, int row0, bool training, float dloss, double lr) {
    w_ = Work{batch, step, row0, training, dloss, lr, 0};
    reduced_ = stepped_ = 0;
    result_ = {};
    sum_loss_ = sum_norm_ = 0;
    updates_ = 0;
  }
  // Evaluation in the middle of an asynchronous segment must not disturb the training run's state.
  Work swap_work(const Work& w) {
    Work old = w_;
    w_ = w;
    return old;
  }
  double loss_sum() const { return w_.loss_sum; }
  bool updated() const { return async_ ? updates_ > 0 : stepped_ == m_.num_chunks(); }
  // Flush kinds: the step's result. Asynchronous kinds: means over the updates of the run.
  StepResult result() const {
    if (!async_ || updates_ == 0) return result_;
    StepResult r = result_;
    r.loss = sum_loss_ / updates_;
    r.grad_norm = sum_norm_ / updates_;
    return r;
  }

  // ---- weight versions (asynchronous kinds) ----
  // Segment start: version 0 = the model's current weights; `update_base`: optimizer updates
  // before this segment (AdamW's bias-correction step counts on).
  void start_versions(int ring_size, int64_t update_base) {
    while (static_cast<int>(ring_.size()) < ring_size)
      ring_.push_back(static_cast<float*>(m_.backend().alloc(m_.flat_size() * sizeof(float))));
    ring_size_ = ring_size;
    ring_version_.assign(ring_size, -1);
    m_.backend().copy(ring_[0], m_.params(), m_.flat_size());
    ring_version_[0] = 0;
    latest_ = 0;
    update_base_ = update_base;
    m_.zero_grads();
  }
  // The latest version becomes model.params() (checkpoints, evaluation and sampling read it).
  void publish_latest() {
    m_.use_params(nullptr);
    m_.backend().copy(m_.params(), buffer(latest_), m_.flat_size());
  }
  void select_version(int, int version) override {
    if (!async_) return;  // flush kinds: the current weights, model.params()
    m_.use_params(version < 0 ? nullptr : buffer(version));
  }

  size_t boundary_floats(int) const override {
    return m_.boundary_floats(s_.step.micro_batch, s_.step.seq_len);
  }
  float* input(int, int slot) override { return m_.slot_input(slot); }
  float* output(int stage, int slot) override { return m_.chunk_output(stage / pp_, slot); }
  float* output_grad(int, int slot) override { return m_.slot_output_grad(slot); }
  float* input_grad(int, int slot) override { return m_.slot_input_grad(slot); }

  void forward(int stage, int microbatch, int slot) override {
    const int c = stage / pp_;
    const LayerRange& r = m_.chunks()[c];
    const bool embedding = r.begin == 0, head = r.end == m_.dims().n_layer + 2;
    const int micro = s_.step.micro_batch, T = s_.step.seq_len;
    if (embedding || head)
      (*w_.batch)(w_.step + microbatch / per_step_, w_.row0 + (microbatch % per_step_) * micro, micro,
                  x_.data(), y_.data());
    m_.set_batch(slot, embedding ? x_.data() : nullptr, head ? y_.data() : nullptr, micro, T);
    w_.loss_sum += m_.forward_chunk(c, slot, w_.training, w_.dloss);
  }

  // BWD and BWD_INPUT run the whole backward of the chunk; BWD_WEIGHT then has nothing left to do.
  // (zb-h1 therefore keeps its order and semantics but not yet its deferred weight-gradient
  // savings: the layers' backward computes input and weight gradients together.)
  void backward(int stage, int, int slot, pipeline::BackwardPart part) override {
    if (part == pipeline::BackwardPart::WEIGHT) return;
    m_.backward_chunk(stage / pp_, slot);
  }

  // Flush kinds: a rank's REDUCE_GRADS come together after its last backward; the last one
  // reduces everything (no overlap with backward under pp > 1: every bucket launches here).
  // Asynchronous kinds (vp = 1): every REDUCE_GRADS is one stage's update.
  void reduce_grads(int) override {
    if (!async_ && ++reduced_ < m_.num_chunks()) return;
    const StepSetup& st = s_.step;
    for (int l = m_.num_layers() - 1; l >= 0; --l) m_.reduce_sequence_parallel_grads(l);
    // Megatron's embedding group: the first stage's wte (embedding) and the last stage's copy
    // (head) get the sum of both gradients, so both copies take the same update.
    if (s_.embedding) {
      const int w = m_.tied_wte_param();
      BATON_ASSERT(w >= 0, "embedding group on a rank without a tied wte copy");
      s_.embedding->all_reduce(m_.table().at(m_.grads(), w), m_.table().numel(w),
                               dist::DType::F32, dist::ReduceOp::SUM);
    }
    st.grads->finish(m_.grads());
    // Global norm: each parameter once over the job (tp shards on every tp rank, replicated ones
    // on tp rank 0; wte on the first stage only, see exclude_from_norm), loss from the last stage.
    double stats[2] = {st.grads->grad_sumsq(m_.grads()), w_.loss_sum};
    w_.loss_sum = 0;
    if (st.tp) st.tp->all_reduce(stats, 1, dist::DType::F64, dist::ReduceOp::SUM);  // norm only
    if (st.dp) st.dp->all_reduce(stats, 2, dist::DType::F64, dist::ReduceOp::SUM);
    if (st.dp && !st.grads->zero1()) stats[0] /= st.dp->size();
    s_.pp->all_reduce(stats, 2, dist::DType::F64, dist::ReduceOp::SUM);
    // Tokens behind one update: the global batch, or (pipedream) one micro-batch per dp replica.
    const int rows = async_ && s_.schedule == "pipedream"
                         ? st.micro_batch * (st.dp ? st.dp->size() : 1)
                         : st.global_batch;
    result_.loss = stats[1] / (double(rows) * st.seq_len);
    result_.grad_norm = std::sqrt(stats[0]);
    result_.clip_scale = 1;
    if (st.grad_clip > 0 && result_.grad_norm > st.grad_clip)
      result_.clip_scale = static_cast<float>(st.grad_clip / (result_.grad_norm + 1e-6));
    BATON_REQUIRE(std::isfinite(result_.loss) && std::isfinite(result_.grad_norm),
                  fmt::format("training diverged at step {} (loss {}, grad norm {})", w_.step + 1,
                              result_.loss, result_.grad_norm),
                  "lower optim.lr or raise optim.warmup_steps");
  }

  // Flush kinds: one optimizer call for all of the rank's OPT_STEPs (the last one). Asynchronous
  // kinds: version n = version n − 1 updated with the accumulated gradient (computed on whichever
  // version the schedule named), into the ring buffer of n; then the gradients restart.
  void optimizer_step(int, int version) override {
    if (!async_) {
      if (++stepped_ < m_.num_chunks()) return;
      s_.step.optimizer->step(m_.params(), m_.grads(), w_.lr, result_.clip_scale, w_.step + 1);
      s_.step.grads->gather_params(m_.params());
      return;
    }
    BATON_ASSERT(version == latest_ + 1, "update to version {} after version {}", version, latest_);
    float* prev = buffer(latest_);
    const int idx = version % ring_size_;
    if (ring_[idx] != prev) m_.backend().copy(ring_[idx], prev, m_.flat_size());
    ring_version_[idx] = version;
    latest_ = version;
    s_.step.optimizer->step(ring_[idx], m_.grads(), w_.lr, result_.clip_scale, update_base_ + version);
    s_.step.grads->gather_params(ring_[idx]);
    m_.zero_grads();
    sum_loss_ += result_.loss;
    sum_norm_ += result_.grad_norm;
    ++updates_;
  }

 private:
  float* buffer(int version) {
    const int idx = version % ring_size_;
    BATON_ASSERT(ring_version_[idx] == version, "weight version {} is no longer kept (ring of {})",
                 version, ring_size_);
    return ring_[idx];
  }

  const PipelineSetup& s_;
  GptModel& m_;
  int pp_;
  bool async_;
  int per_step_;
  std::vector<int32_t> x_, y_;
  Work w_;
  int reduced_ = 0, stepped_ = 0;
  StepResult result_;
  // Asynchronous kinds.
  std::vector<float*> ring_;
  std::vector<int> ring_version_;
  int ring_size_ = 1, latest_ = 0, updates_ = 0;
  int64_t update_base_ = 0;
  double sum_loss_ = 0, sum_norm_ = 0;
};

std::unique_ptr<dist::Comm> make_embedding_group(dist::Comm& pp) {
  const int r = pp.rank(), last = pp.size() - 1;
  const bool end = r == 0 || r == last;
  std::unique_ptr<dist::Comm> g = pp.split(end ? 0 : r, r);
  if (!end || pp.size() == 1) return nullptr;
  return g;
}

pipeline::ScheduleSpec PipelineStep::spec_for(int steps) const {
  return pipeline::ScheduleSpec{.kind = s_.schedule, .pp = s_.pp->size(), .vp = s_.vp,
                                .microbatches = microbatches_, .steps = steps,
                                .vertical_sync = s_.vertical_sync};
}

static pipeline::ExecOptions exec_options(const PipelineSetup& s) {
  pipeline::ExecOptions o;
  if (s.scatter_gather) {
    const TensorParallel& tp = s.step.model->tp();
    BATON_REQUIRE(tp.active() && !tp.sp(),
                  "parallel.scatter_gather = true needs tp > 1 without sequence parallelism",
                  "with sequence parallelism the activations crossing stages are already split over "
                  "tp (Megatron disables scatter/gather there); set parallel.scatter_gather = false");
    o.scatter_gather = tp.comm;
  }
  return o;
}

PipelineStep::PipelineStep(const PipelineSetup& setup) : s_(setup) {
  const StepSetup& st = s_.step;
  BATON_ASSERT(s_.pp && st.model && st.optimizer && st.grads, "incomplete pipeline setup");
  const int dp = st.dp ? st.dp->size() : 1;
  microbatches_ = st.global_batch / (st.micro_batch * dp);
  BATON_ASSERT(microbatches_ * st.micro_batch * dp == st.global_batch,
               "global batch {} does not split into {} ranks x micro-batches of {}", st.global_batch,
               dp, st.micro_batch);
  BATON_ASSERT(st.model->num_chunks() == s_.vp, "model has {} chunks, vp = {}", st.model->num_chunks(), s_.vp);
  async_ = is_async_schedule(s_.schedule);
  const pipeline::ExecOptions opts = exec_options(s_);
  if (!async_) {
    executor_ = std::make_unique<pipeline::Executor>(pipeline::lower(pipeline::generate(spec_for(1))),
                                                     s_.pp->rank(), *s_.pp, opts);
    st.model->reserve(st.micro_batch, st.seq_len, executor_->slots());
  } else {
    BATON_REQUIRE(s_.total_steps > 0, "asynchronous pipeline without a step count",
                  "set train.steps");
    // A short program of the same kind sizes the activation slots (the in-flight count does not
    // grow with the number of steps) and checks the spec (e.g. 2bw needs m ≥ pp) up front; one
    // more slot serves evaluation while a segment is in flight.
    const int probe_steps = static_cast<int>(std::min<int64_t>(s_.total_steps, s_.pp->size() + 1));
    pipeline::Executor probe(pipeline::lower(pipeline::generate(spec_for(probe_steps))), s_.pp->rank(),
                             *s_.pp, opts);
    st.model->reserve(st.micro_batch, st.seq_len, probe.slots() + 1);
    eval_comm_ = s_.pp->split(0, s_.pp->rank());
  }
  stage_ = std::make_unique<GptStage>(s_, async_, microbatches_);
}

PipelineStep::~PipelineStep() = default;

int PipelineStep::slots() const { return s_.step.model->num_slots(); }

bool PipelineStep::drained() const { return !async_ || !executor_ || executor_->finished(); }

int PipelineStep::weight_versions() const { return executor_ ? executor_->weight_versions() : 1; }

// Asynchronous kinds: the program from `step` to the next drain point, fresh weight versions.
void PipelineStep::start_segment(int64_t step) {
  int64_t end = s_.total_steps;
  if (s_.drain_every > 0) end = std::min(end, (step / s_.drain_every + 1) * s_.drain_every);
  BATON_REQUIRE(step < end, fmt::format("pipeline step {} is past train.steps = {}", step + 1, s_.total_steps),
                "raise train.steps");
  executor_ = std::make_unique<pipeline::Executor>(
      pipeline::lower(pipeline::generate(spec_for(static_cast<int>(end - step)))), s_.pp->rank(),
      *s_.pp, exec_options(s_));
  BATON_ASSERT(executor_->slots() < s_.step.model->num_slots(), "segment needs {} slots, {} reserved",
               executor_->slots(), s_.step.model->num_slots());
  segment_start_ = next_step_ = step;
  const int64_t updates_per_step = s_.schedule == "pipedream" ? microbatches_ : 1;
  stage_->start_versions(executor_->weight_versions(), step * updates_per_step);
}

StepResult PipelineStep::step(const BatchRows& batch, int64_t step, double lr) {
  const StepSetup& st = s_.step;
  const int dp_rank = st.dp ? st.dp_rank : 0;
  const int rows = st.global_batch / (st.dp ? st.dp->size() : 1);
  if (!async_) {
    const float dloss = 1.0f / static_cast<float>(int64_t(st.global_batch) * st.seq_len);
    st.model->zero_grads();
    stage_->begin(&batch, step, dp_rank * rows, true, dloss, lr);
    stats_ = executor_->run(*stage_);
    BATON_ASSERT(stage_->updated(), "the schedule ran no optimizer step on this rank");
    return stage_->result();
  }
  if (drained()) start_segment(step);
  BATON_ASSERT(step == next_step_, "asynchronous pipeline: step {} after step {}", step + 1, next_step_);
  const bool pipedream = s_.schedule == "pipedream";
  // d(loss)/d(per-token loss) of one update: 2bw averages over the global batch, pipedream over
  // one micro-batch of every data-parallel replica.
  const int64_t tokens = pipedream ? int64_t(st.micro_batch) * (st.dp ? st.dp->size() : 1) * st.seq_len
                                   : int64_t(st.global_batch) * st.seq_len;
  stage_->begin(&batch, segment_start_, dp_rank * rows, true, 1.0f / static_cast<float>(tokens), lr);
  const int updates_per_step = pipedream ? microbatches_ : 1;
  stats_ = executor_->run_until_update(*stage_, static_cast<int>((step - segment_start_ + 1) * updates_per_step));
  BATON_ASSERT(stage_->updated(), "the schedule ran no optimizer step on this rank");
  stage_->publish_latest();
  next_step_ = step + 1;
  return stage_->result();
}

double PipelineStep::evaluate(const BatchRows& rows_fn, int batches, int rows) {
  const StepSetup& st = s_.step;
  const int dp = st.dp ? st.dp->size() : 1, dp_rank = st.dp ? st.dp_rank : 0;
  const int mine = rows / dp;
  // Asynchronous kinds may be mid-segment: evaluate on the latest weights in the spare slot, over
  // a communicator of its own, and leave the training run's state as it was.
  dist::Comm& comm = eval_comm_ ? *eval_comm_ : *s_.pp;
  const int slot = async_ ? slots() - 1 : 0;
  double sum = 0;
  for (int b = 0; b < batches; ++b) {
    GptStage::Work saved = stage_->swap_work(
        GptStage::Work{.batch = &rows_fn, .step = b, .row0 = dp_rank * mine, .training = false});
    pipeline::run_forward_only(*stage_, comm, s_.pp->size(), s_.vp, mine / st.micro_batch, slot);
    sum += stage_->loss_sum();
    stage_->swap_work(saved);
  }
  sum = s_.pp->all_reduce_scalar(sum);  // the last stage has the losses
  if (st.dp) sum = st.dp->all_reduce_scalar(sum);
  return sum / (double(batches) * rows * st.seq_len);
}

}  // namespace baton
