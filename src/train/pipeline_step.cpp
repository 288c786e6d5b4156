// PipelineStep: the flush schedules over a chunked GptModel; see pipeline_step.h.
#include "train/pipeline_step.h"

#include <cmath>
#include <vector>

#include "core/error.h"
#include "pipeline/lower.h"
#include "pipeline/schedules.h"

namespace baton {

// The executor's view of this rank's GptModel (DESIGN §2: the executor never sees the model).
// Model stage s is chunk s / pp of this rank (chunk c of rank r is stage c·pp + r, PTD-P §1.6).
class PipelineStep::GptStage : public pipeline::Stage {
 public:
  explicit GptStage(const PipelineSetup& s)
      : s_(s), m_(*s.step.model), pp_(s.pp->size()),
        x_(size_t(s.step.micro_batch) * s.step.seq_len), y_(x_.size()) {}

  // What the next run computes: rows row0 + k·micro_batch .. of `batch(step, ...)` as micro-batch k.
  void begin(const BatchRows* batch, int64_t step, int row0, bool training, float dloss, double lr) {
    batch_ = batch;
    step_ = step;
    row0_ = row0;
    training_ = training;
    dloss_ = dloss;
    lr_ = lr;
    loss_sum_ = 0;
    reduced_ = stepped_ = 0;
    result_ = {};
  }
  double loss_sum() const { return loss_sum_; }
  const StepResult& result() const { return result_; }
  bool updated() const { return stepped_ == m_.num_chunks(); }

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
    if (embedding || head) (*batch_)(step_, row0_ + microbatch * micro, micro, x_.data(), y_.data());
    m_.set_batch(slot, embedding ? x_.data() : nullptr, head ? y_.data() : nullptr, micro, T);
    loss_sum_ += m_.forward_chunk(c, slot, training_, dloss_);
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
  void reduce_grads(int) override {
    if (++reduced_ < m_.num_chunks()) return;
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
    double stats[2] = {st.grads->grad_sumsq(m_.grads()), loss_sum_};
    if (st.tp) st.tp->all_reduce(stats, 1, dist::DType::F64, dist::ReduceOp::SUM);  // norm only
    if (st.dp) st.dp->all_reduce(stats, 2, dist::DType::F64, dist::ReduceOp::SUM);
    if (st.dp && !st.grads->zero1()) stats[0] /= st.dp->size();
    s_.pp->all_reduce(stats, 2, dist::DType::F64, dist::ReduceOp::SUM);
    result_.loss = stats[1] / (double(st.global_batch) * st.seq_len);
    result_.grad_norm = std::sqrt(stats[0]);
    if (st.grad_clip > 0 && result_.grad_norm > st.grad_clip)
      result_.clip_scale = static_cast<float>(st.grad_clip / (result_.grad_norm + 1e-6));
    BATON_REQUIRE(std::isfinite(result_.loss) && std::isfinite(result_.grad_norm),
                  fmt::format("training diverged at step {} (loss {}, grad norm {})", step_ + 1,
                              result_.loss, result_.grad_norm),
                  "lower optim.lr or raise optim.warmup_steps");
  }

  // One optimizer call for all of the rank's OPT_STEPs (the last one).
  void optimizer_step(int, int) override {
    if (++stepped_ < m_.num_chunks()) return;
    s_.step.optimizer->step(m_.params(), m_.grads(), lr_, result_.clip_scale, step_ + 1);
    s_.step.grads->gather_params(m_.params());
  }

 private:
  const PipelineSetup& s_;
  GptModel& m_;
  int pp_;
  std::vector<int32_t> x_, y_;
  const BatchRows* batch_ = nullptr;
  int64_t step_ = 0;
  int row0_ = 0;
  bool training_ = true;
  float dloss_ = 0;
  double lr_ = 0, loss_sum_ = 0;
  int reduced_ = 0, stepped_ = 0;
  StepResult result_;
};

std::unique_ptr<dist::Comm> make_embedding_group(dist::Comm& pp) {
  const int r = pp.rank(), last = pp.size() - 1;
  const bool end = r == 0 || r == last;
  std::unique_ptr<dist::Comm> g = pp.split(end ? 0 : r, r);
  if (!end || pp.size() == 1) return nullptr;
  return g;
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
  pipeline::ScheduleSpec spec{.kind = s_.schedule, .pp = s_.pp->size(), .vp = s_.vp,
                              .microbatches = microbatches_, .steps = 1};
  executor_ = std::make_unique<pipeline::Executor>(pipeline::lower(pipeline::generate(spec)),
                                                   s_.pp->rank(), *s_.pp);
  st.model->reserve(st.micro_batch, st.seq_len, executor_->slots());
  stage_ = std::make_unique<GptStage>(s_);
}

PipelineStep::~PipelineStep() = default;

int PipelineStep::slots() const { return executor_->slots(); }

StepResult PipelineStep::step(const BatchRows& batch, int64_t step, double lr) {
  const StepSetup& st = s_.step;
  const int dp_rank = st.dp ? st.dp_rank : 0;
  const int rows = st.global_batch / (st.dp ? st.dp->size() : 1);
  const float dloss = 1.0f / static_cast<float>(int64_t(st.global_batch) * st.seq_len);
  st.model->zero_grads();
  stage_->begin(&batch, step, dp_rank * rows, true, dloss, lr);
  stats_ = executor_->run(*stage_);
  BATON_ASSERT(stage_->updated(), "the schedule ran no optimizer step on this rank");
  return stage_->result();
}

double PipelineStep::evaluate(const BatchRows& rows_fn, int batches, int rows) {
  const StepSetup& st = s_.step;
  const int dp = st.dp ? st.dp->size() : 1, dp_rank = st.dp ? st.dp_rank : 0;
  const int mine = rows / dp;
  double sum = 0;
  for (int b = 0; b < batches; ++b) {
    stage_->begin(&rows_fn, b, dp_rank * mine, false, 0.0f, 0.0);
    pipeline::run_forward_only(*stage_, *s_.pp, s_.pp->size(), s_.vp, mine / st.micro_batch);
    sum += stage_->loss_sum();
  }
  sum = s_.pp->all_reduce_scalar(sum);  // the last stage has the losses
  if (st.dp) sum = st.dp->all_reduce_scalar(sum);
  return sum / (double(batches) * rows * st.seq_len);
}

}  // namespace baton
