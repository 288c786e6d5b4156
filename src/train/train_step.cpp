#include "train/train_step.h"

#include <cmath>
#include <vector>

#include "core/error.h"

namespace baton {

StepResult train_step(const StepSetup& s, const BatchRows& batch, int64_t step, double lr) {
  GptModel& model = *s.model;
  const int dp_size = s.dp ? s.dp->size() : 1;
  const int rows = s.global_batch / dp_size;  // this rank's slice
  const int micro = s.micro_batch, T = s.seq_len;
  const int accum = rows / micro;
  BATON_ASSERT(rows * dp_size == s.global_batch && accum * micro == rows,
               "global batch {} does not split into {} ranks x micro-batches of {}", s.global_batch,
               dp_size, micro);
  const float dloss = 1.0f / static_cast<float>(int64_t(s.global_batch) * T);
  std::vector<int32_t> x(size_t(micro) * T), y(size_t(micro) * T);

  model.zero_grads();
  for (int mb = 0; mb < accum; ++mb) {
    batch(step, s.dp_rank * rows + mb * micro, micro, x.data(), y.data());
    model.set_batch(0, x.data(), y.data(), micro, T);
    model.forward_chunk(0, 0, true, dloss);  // the loss stays on the device until the step's end
    const bool last = mb + 1 == accum;
    // On the last micro-batch each layer's gradients are final once its backward is done: sum the
    // sequence-parallel partials over tp, then launch the data-parallel buckets that are complete
    // (in that order: a bucket in flight must not be written to).
    model.backward(0, last ? std::function<void(int)>([&](int layer) {
                               model.reduce_sequence_parallel_grads(layer);
                               s.grads->layer_done(layer, model.grads());
                             })
                           : std::function<void(int)>());
  }
  s.grads->finish(model.grads());

  // Global norm: this rank's share, summed over the groups that split the gradient.
  double sumsq = s.grads->grad_sumsq(model.grads());
  double stats[2] = {sumsq, model.take_loss_sum()};
  if (s.tp) s.tp->all_reduce(stats, 1, dist::DType::F64, dist::ReduceOp::SUM);  // norm only
  if (s.dp) s.dp->all_reduce(stats, 2, dist::DType::F64, dist::ReduceOp::SUM);
  if (s.dp && !s.grads->zero1()) stats[0] /= dp_size;  // every dp rank counted the whole gradient
  StepResult r;
  r.loss = stats[1] / (double(s.global_batch) * T);
  r.grad_norm = std::sqrt(stats[0]);
  if (s.grad_clip > 0 && r.grad_norm > s.grad_clip)
    r.clip_scale = static_cast<float>(s.grad_clip / (r.grad_norm + 1e-6));
  BATON_REQUIRE(std::isfinite(r.loss) && std::isfinite(r.grad_norm),
                fmt::format("training diverged at step {} (loss {}, grad norm {})", step + 1, r.loss,
                            r.grad_norm),
                "lower optim.lr or raise optim.warmup_steps");
  s.optimizer->step(model.params(), model.grads(), lr, r.clip_scale, step + 1);
  s.grads->gather_params(model.params());
  model.refresh_compute_params();
  return r;
}

}  // namespace baton
