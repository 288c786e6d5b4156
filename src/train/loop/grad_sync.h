// GradSync: everything between a rank's last backward before an update and its optimizer step,
// for every schedule and layout (one copy of it, DESIGN §2):
// - as each local layer's gradients become final (its last backward before the update), the
//   sequence-parallel partial sums over tp, then the data-parallel buckets that are complete
//   (DataParallelGrads: overlapped with the rest of the backward, also under pp > 1);
// - REDUCE_TIED: the copies of parameters shared between stages (a GPT's tied wte on the first
//   and last stage, Megatron's embedding group) sum their gradients, so both copies take the same
//   update; only then may their buckets launch (a sum over dp and one over the tied group commute,
//   but ZeRO-1 leaves each dp rank only its piece of a reduced bucket);
// - REDUCE_GRADS: the stage replicas' sum (PipeDream's 1F1B-RR), the data-parallel reduction, the
//   global gradient norm — each parameter counted once over the job: tp shards on every tp rank,
//   replicated ones on tp rank 0, a tied parameter on the stage that owns it — clipping and the
//   divergence check. The loss rides in the same all-reduces.
//
// The norm spans the whole pipeline (a collective over it at every update) except under 1F1B-RR,
// where stages update at different rates: each stage clips with its own norm, the stages sharing
// tied parameters (which update together) with the norm of their gradients together.
#pragma once
#include <cstdint>

#include "dist/comm.h"
#include "model/sequential_model.h"
#include "optim/data_parallel.h"

namespace baton {

struct GradSyncSetup {
  SequentialModel* model = nullptr;
  DataParallelGrads* grads = nullptr;  // data-parallel buckets (and ZeRO-1); dp may be none
  dist::Comm* tp = nullptr;       // tensor-parallel group; null = none
  dist::Comm* dp = nullptr;       // data-parallel group; null = none
  dist::Comm* pp = nullptr;       // the pipeline (the norm's and loss's sum over stages); null = none
  dist::Comm* tied = nullptr;     // the stages sharing tied parameters with this rank; null = none
  dist::Comm* replica = nullptr;  // this stage's replicas (1F1B-RR: per-stage norms); null = none
  double grad_clip = 0;           // 0 = no clipping
};

// The outcome of one update's reduction.
struct UpdateStats {
  double loss_sum = 0;   // the loss terms' sum over the job (pipeline and data-parallel ranks)
  double grad_norm = 0;  // before clipping
  float clip_scale = 1;
  double own_sumsq = 0;  // 1F1B-RR: this stage's own squared norm (the step's statistics)
  int buckets_early = 0;  // data-parallel buckets launched while the backward still ran
};

class GradSync {
 public:
  explicit GradSync(const GradSyncSetup& setup);

  // The gradients of local `layer` are final for the coming update.
  void layer_done(int layer);
  // REDUCE_TIED.
  void reduce_tied();
  // REDUCE_GRADS, with this rank's loss sum since the last update; `update` names the update in
  // the divergence error (1-based trainer step).
  UpdateStats reduce(double loss_sum, int64_t update);
  bool per_stage_norm() const { return s_.replica != nullptr; }

 private:
  GradSyncSetup s_;
};

}  // namespace baton
