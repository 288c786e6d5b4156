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
  // `stages`: pipeline stages (the pp group's size without replication); `replica`: the group of
  // this stage's replicas (1F1B-RR), null without replication.
  GptStage(const PipelineSetup& s, bool async, int microbatches, int stages, dist::Comm* replica)
      : s_(s), m_(*s.step.model), pp_(stages), async_(async), per_step_(microbatches),
        replica_(replica), x_(size_t(s.step.micro_batch) * s.step.seq_len), y_(x_.size()) {}
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
    rep_sumsq_ = 0;
  }
  // 1F1B-RR: this rank's mean squared stage-gradient norm over the run's updates and its loss sum.
  std::pair<double, double> replicated_stats() { return {updates_ > 0 ? rep_sumsq_ / updates_ : 0.0, loss_sum()}; }
  // Evaluation in the middle of an asynchronous segment must not disturb the training run's state
  // (its losses so far are collected from the device first).
  Work swap_work(const Work& w) {
    loss_sum();
    Work old = w_;
    w_ = w;
    return old;
  }
  // The work's loss sum: the forwards' device-side sums collected (one synchronisation).
  double loss_sum() {
    w_.loss_sum += m_.take_loss_sum();
    return w_.loss_sum;
  }
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

  size_t boundary_count(int) const override {
    return m_.boundary_count(s_.step.micro_batch, s_.step.seq_len);
  }
  DType boundary_dtype() const override { return m_.act_dtype(); }
  void* input(int, int slot) override { return m_.slot_input(slot); }
  void* output(int stage, int slot) override { return m_.chunk_output(stage / pp_, slot); }
  void* output_grad(int, int slot) override { return m_.slot_output_grad(slot); }
  void* input_grad(int, int slot) override { return m_.slot_input_grad(slot); }

  void forward(int stage, int microbatch, int slot) override {
    const int c = stage / pp_;
    const LayerRange& r = m_.chunks()[c];
    const bool embedding = r.begin == 0, head = r.end == m_.dims().n_layer + 2;
    const int micro = s_.step.micro_batch, T = s_.step.seq_len;
    if (embedding || head)
      (*w_.batch)(w_.step + microbatch / per_step_, w_.row0 + (microbatch % per_step_) * micro, micro,
                  x_.data(), y_.data());
    m_.set_batch(slot, embedding ? x_.data() : nullptr, head ? y_.data() : nullptr, micro, T);
    m_.forward_chunk(c, slot, w_.training, w_.dloss);
  }

  // BWD: the chunk's whole backward. Zero bubble (zb-h1, Qi et al. §2–3): BWD_INPUT only the
  // input gradient (sent upstream right after), keeping each matmul's and layernorm's output
  // gradient in the slot; BWD_WEIGHT, later in the list, the parameter gradients from them.
  void backward(int stage, int, int slot, pipeline::BackwardPart part) override {
    const BackwardPass pass = part == pipeline::BackwardPart::FULL    ? BackwardPass::FULL
                              : part == pipeline::BackwardPart::INPUT ? BackwardPass::INPUT
                                                                      : BackwardPass::WEIGHT;
    m_.backward_chunk(stage / pp_, slot, {}, pass);
  }

  // Flush kinds: a rank's REDUCE_GRADS come together after its last backward; the last one
  // reduces everything (no overlap with backward under pp > 1: every bucket launches here).
  // Asynchronous kinds (vp = 1): every REDUCE_GRADS is one stage's update.
  void reduce_grads(int) override {
    if (replica_) return reduce_replicated();
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
    double stats[2] = {st.grads->grad_sumsq(m_.grads()), loss_sum()};
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
      m_.refresh_compute_params();
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

  // 1F1B-RR (PipeDream §3.2): the stage's replicas sum their gradients (each computed on its own
  // micro-batch, dloss = 1 / its tokens); replica j of the first and of the last stage then sum
  // their tied wte copies (each already the sum over its stage's replicas). Clipping is per stage
  // (stages update at different rates, so no collective spans all stages), except that the first
  // and the last stage — which update together, r_0 = r_{p−1} — clip with the norm of their
  // gradients together (wte once), so that both apply the same update to the tied wte and its two
  // copies stay identical.
  void reduce_replicated() {
    const StepSetup& st = s_.step;
    if (replica_->size() > 1)
      replica_->all_reduce(m_.grads(), m_.flat_size(), dist::DType::F32, dist::ReduceOp::SUM);
    const int w = m_.tied_wte_param();
    if (s_.embedding) {
      BATON_ASSERT(w >= 0, "embedding group on a rank without a tied wte copy");
      s_.embedding->all_reduce(m_.table().at(m_.grads(), w), m_.table().numel(w), dist::DType::F32,
                               dist::ReduceOp::SUM);
    }
    st.grads->finish(m_.grads());  // dp = 1: nothing to reduce
    // The head's wte copy is left out of grad_sumsq (the caller excludes it, as for every
    // pipeline): counted once, on the first stage.
    const double own = st.grads->grad_sumsq(m_.grads());
    double sumsq = own;
    if (s_.embedding) s_.embedding->all_reduce(&sumsq, 1, dist::DType::F64, dist::ReduceOp::SUM);
    rep_sumsq_ += own;
    result_.loss = 0;
    result_.grad_norm = std::sqrt(sumsq);
    result_.clip_scale = 1;
    if (st.grad_clip > 0 && result_.grad_norm > st.grad_clip)
      result_.clip_scale = static_cast<float>(st.grad_clip / (result_.grad_norm + 1e-6));
    BATON_REQUIRE(std::isfinite(result_.grad_norm),
                  fmt::format("training diverged at step {} (grad norm {})", w_.step + 1, result_.grad_norm),
                  "lower optim.lr or raise optim.warmup_steps");
  }

  const PipelineSetup& s_;
  GptModel& m_;
  int pp_;
  bool async_;
  int per_step_;
  dist::Comm* replica_ = nullptr;
  double rep_sumsq_ = 0;
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

int stage_of_rank(const std::vector<int>& replicas, int rank) {
  if (replicas.empty()) return rank;
  int first = 0;
  for (size_t s = 0; s < replicas.size(); ++s) {
    if (rank < first + replicas[s]) return static_cast<int>(s);
    first += replicas[s];
  }
  BATON_ASSERT(false, "rank {} beyond the {} ranks of the replicated stages", rank, first);
  return -1;
}

int stage_first_rank(const std::vector<int>& replicas, int stage) {
  if (replicas.empty()) return stage;
  int first = 0;
  for (int t = 0; t < stage; ++t) first += replicas[t];
  return first;
}

std::unique_ptr<dist::Comm> make_embedding_group(dist::Comm& pp, const std::vector<int>& replicas) {
  if (!replicas.empty()) {
    // 1F1B-RR: replica j of the first stage with replica j of the last.
    const int stages = static_cast<int>(replicas.size()), r = pp.rank();
    BATON_REQUIRE(replicas.front() == replicas.back(),
                  fmt::format("replicated stages {} give the first stage {} replicas and the last {}",
                              fmt::join(replicas, ","), replicas.front(), replicas.back()),
                  "the tied token embedding is updated on the first and the last stage together: "
                  "give both the same number of replicas");
    const int s = stage_of_rank(replicas, r);
    int first = 0;
    for (int t = 0; t < s; ++t) first += replicas[t];
    const bool end = s == 0 || s == stages - 1;
    std::unique_ptr<dist::Comm> g = pp.split(end ? r - first : replicas.front() + r, r);
    if (!end || stages == 1) return nullptr;
    return g;
  }
  const int r = pp.rank(), last = pp.size() - 1;
  const bool end = r == 0 || r == last;
  std::unique_ptr<dist::Comm> g = pp.split(end ? 0 : r, r);
  if (!end || pp.size() == 1) return nullptr;
  return g;
}

pipeline::ScheduleSpec PipelineStep::spec_for(int steps) const {
  return pipeline::ScheduleSpec{.kind = s_.schedule, .pp = stages_, .vp = s_.vp,
                                .microbatches = microbatches_, .steps = steps,
                                .replicas = s_.replicas, .vertical_sync = s_.vertical_sync};
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
  stages_ = s_.pp->size();
  my_stage_ = s_.pp->rank();
  const bool replicated = !s_.replicas.empty();
  if (replicated) {
    // 1F1B-RR (PipeDream §3.2): stage s on replicas[s] consecutive ranks of the pp group.
    BATON_REQUIRE(s_.schedule == "pipedream",
                  fmt::format("replicated stages are a pipedream option, not one of '{}'", s_.schedule),
                  "drop the replicas or use parallel.schedule = \"pipedream\"");
    int total = 0;
    for (int r : s_.replicas) total += r;
    BATON_REQUIRE(total == s_.pp->size(),
                  fmt::format("replicated stages {} need {} pipeline ranks, the pipeline group has {}",
                              fmt::join(s_.replicas, ","), total, s_.pp->size()),
                  "the replica counts must sum to the ranks of a pipeline");
    BATON_REQUIRE(!st.dp && !st.model->tp().active(),
                  "replicated pipeline stages (1F1B-RR) with tensor or data parallelism are not supported",
                  "replicas are PipeDream's data parallelism per stage: use tp = dp = 1 with them");
    stages_ = static_cast<int>(s_.replicas.size());
    my_stage_ = stage_of_rank(s_.replicas, s_.pp->rank());
    for (int t = 0; t < my_stage_; ++t) my_replica_ -= s_.replicas[t];
    my_replica_ += s_.pp->rank();
    BATON_ASSERT(st.model->chunks() == pipeline_chunks(st.model->dims().n_layer, stages_, 1, my_stage_),
                 "rank {} holds the wrong chunks for stage {}", s_.pp->rank(), my_stage_);
    replica_comm_ = s_.pp->split(my_stage_, s_.pp->rank());
  }
  const pipeline::ExecOptions opts = exec_options(s_);
  if (!async_) {
    executor_ = std::make_unique<pipeline::Executor>(pipeline::lower(pipeline::generate(spec_for(1))),
                                                     s_.pp->rank(), *s_.pp, opts);
    // Split backward (zb-h1): each slot also keeps the output gradients its BWD_WEIGHT reads.
    const std::vector<pipeline::Instr>& list = executor_->instructions();
    const bool split = std::any_of(list.begin(), list.end(), [](const pipeline::Instr& in) {
      return in.op == pipeline::Op::BWD_WEIGHT;
    });
    st.model->reserve(st.micro_batch, st.seq_len, executor_->slots(), split);
  } else {
    BATON_REQUIRE(s_.total_steps > 0, "asynchronous pipeline without a step count",
                  "set train.steps");
    // A short program of the same kind sizes the activation slots (the in-flight count does not
    // grow with the number of steps) and checks the spec (e.g. 2bw needs m ≥ pp) up front; one
    // more slot serves evaluation while a segment is in flight.
    const int probe_steps = static_cast<int>(std::min<int64_t>(s_.total_steps, s_.pp->size() + 1));
    if (s_.schedule == "pipedream") {
      BATON_ASSERT(microbatches_ % (replicated ? s_.replicas[my_stage_] : 1) == 0,
                   "{} micro-batches over {} replicas", microbatches_, s_.replicas[my_stage_]);
      updates_per_step_ = microbatches_ / (replicated ? s_.replicas[my_stage_] : 1);
    }
    pipeline::Executor probe(pipeline::lower(pipeline::generate(spec_for(probe_steps))), s_.pp->rank(),
                             *s_.pp, opts);
    st.model->reserve(st.micro_batch, st.seq_len, probe.slots() + 1);
    // Evaluation runs on replica 0 of every stage (rank = stage in this communicator).
    eval_comm_ = s_.pp->split(my_replica_ == 0 ? 0 : 1, s_.pp->rank());
  }
  stage_ = std::make_unique<GptStage>(s_, async_, microbatches_, stages_, replica_comm_.get());
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
  stage_->start_versions(executor_->weight_versions(), step * updates_per_step_);
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
  // (1F1B-RR: each micro-batch's gradient is its own mean, dp = 1; the replicas sum them.)
  const int64_t tokens = pipedream ? int64_t(st.micro_batch) * (st.dp ? st.dp->size() : 1) * st.seq_len
                                   : int64_t(st.global_batch) * st.seq_len;
  stage_->begin(&batch, segment_start_, dp_rank * rows, true, 1.0f / static_cast<float>(tokens), lr);
  stats_ = executor_->run_until_update(*stage_, static_cast<int>((step - segment_start_ + 1) * updates_per_step_));
  BATON_ASSERT(stage_->updated(), "the schedule ran no optimizer step on this rank");
  stage_->publish_latest();
  next_step_ = step + 1;
  if (s_.replicas.empty()) return stage_->result();
  // 1F1B-RR: the step's statistics, once per step (every rank's portion of the step depends only
  // on the other ranks' portions of the same step, so this collective cannot block the pipeline):
  // loss per token of the global batch (the last stage's replicas hold it), grad norm
  // √Σ_s mean over stage s's updates of its squared norm (replica 0 of each stage contributes).
  auto [sumsq, loss_sum] = stage_->replicated_stats();
  double stats[2] = {my_replica_ == 0 ? sumsq : 0.0, loss_sum};
  s_.pp->all_reduce(stats, 2, dist::DType::F64, dist::ReduceOp::SUM);
  StepResult r = stage_->result();
  r.loss = stats[1] / (double(st.global_batch) * st.seq_len);
  r.grad_norm = std::sqrt(stats[0]);
  return r;
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
    if (my_replica_ == 0)  // 1F1B-RR: replica 0 of each stage (eval_comm_ rank = stage)
      pipeline::run_forward_only(*stage_, comm, stages_, s_.vp, mine / st.micro_batch, slot);
    sum += stage_->loss_sum();
    stage_->swap_work(saved);
  }
  sum = s_.pp->all_reduce_scalar(sum);  // the last stage has the losses
  if (st.dp) sum = st.dp->all_reduce_scalar(sum);
  return sum / (double(batches) * rows * st.seq_len);
}

}  // namespace baton
