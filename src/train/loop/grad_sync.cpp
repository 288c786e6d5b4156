// GradSync; see grad_sync.h.
#include "train/loop/grad_sync.h"

#include <cmath>

#include "core/error.h"

namespace baton {

GradSync::GradSync(const GradSyncSetup& setup) : s_(setup) {
  BATON_ASSERT(s_.model && s_.grads, "incomplete gradient sync setup");
  SequentialModel& m = *s_.model;
  BATON_ASSERT(s_.tied || m.shared_params().empty(),
               "the model shares parameters with other stages but has no tied group");
  BATON_ASSERT(!s_.replica || !s_.dp, "replicated stages (1F1B-RR) with data parallelism");
  if (!s_.tied) return;
  // A tied copy's buckets wait for REDUCE_TIED; the copy that is not owned here is counted on the
  // stage that owns it.
  s_.grads->set_late(m.table(), m.shared_params());
  for (int i : m.shared_params())
    if (!m.owns_param(i)) s_.grads->exclude_from_norm(m.table(), i);
}

void GradSync::layer_done(int layer) {
  s_.model->reduce_sequence_parallel_grads(layer);
  s_.grads->layer_done(layer, s_.model->grads_of_finished_layers());
}

void GradSync::reduce_tied() {
  BATON_ASSERT(s_.tied, "REDUCE_TIED on a rank without tied layers");
  SequentialModel& m = *s_.model;
  for (int i : m.shared_params())
    s_.tied->all_reduce(m.table().at(m.grads(), i), m.table().numel(i), DType::F32,
                        dist::ReduceOp::SUM);
  s_.grads->late_done(m.grads());
}

UpdateStats GradSync::reduce(double loss_sum, int64_t update) {
  SequentialModel& m = *s_.model;
  // 1F1B-RR (PipeDream §3.2): the replicas of a stage sum their gradients (each computed on its
  // own micro-batch) before the update they take together.
  if (s_.replica && s_.replica->size() > 1)
    s_.replica->all_reduce(m.grads(), m.flat_size(), DType::F32, dist::ReduceOp::SUM);
  s_.grads->finish(m.grads());
  UpdateStats r;
  r.buckets_early = s_.grads->launched_early();
  double stats[2] = {s_.grads->grad_sumsq(m.grads()), loss_sum};
  r.own_sumsq = stats[0];
  if (per_stage_norm()) {
    // Stages update at different rates: no collective across the pipeline. The stages sharing
    // tied parameters (r_0 = r_{p−1}: they update together) clip with their joint norm, so both
    // apply the same update to the tied copies.
    if (s_.tied) s_.tied->all_reduce(stats, 1, DType::F64, dist::ReduceOp::SUM);
    r.loss_sum = loss_sum;  // combined once per step by the caller
  } else {
    if (s_.tp) s_.tp->all_reduce(stats, 1, DType::F64, dist::ReduceOp::SUM);  // norm only
    if (s_.dp) s_.dp->all_reduce(stats, 2, DType::F64, dist::ReduceOp::SUM);
    // Without ZeRO-1 every dp rank holds (and counted) the whole reduced gradient.
    if (s_.dp && !s_.grads->zero1()) stats[0] /= s_.dp->size();
    if (s_.pp) s_.pp->all_reduce(stats, 2, DType::F64, dist::ReduceOp::SUM);
    r.loss_sum = stats[1];
  }
  r.grad_norm = std::sqrt(stats[0]);
  if (s_.grad_clip > 0 && r.grad_norm > s_.grad_clip)
    r.clip_scale = static_cast<float>(s_.grad_clip / (r.grad_norm + 1e-6));
  // The loss sum and the norm come out of the same reductions on every rank: each raises this at
  // the same update, and the job reports it once.
  if (!std::isfinite(r.loss_sum) || !std::isfinite(r.grad_norm))
    throw AgreedError(fmt::format("training diverged at step {} (loss sum {}, grad norm {})", update, r.loss_sum,
                                  r.grad_norm),
                      "lower optim.lr or raise optim.warmup_steps");
  return r;
}

}  // namespace baton
