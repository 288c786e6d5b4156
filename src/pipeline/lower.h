// Lowering: a generator's compute-only Program -> the Program the executor runs. Adds, per rank:
// - RECV_ACT right before each FWD of a stage > 0 and SEND_ACT right after each FWD of a stage
//   that is not the last; RECV_GRAD right before each BWD/BWD_INPUT of a stage that is not the
//   last and SEND_GRAD right after it for a stage > 0. Peers follow Program::rank_of (1F1B-RR).
// - REDUCE_GRADS + OPT_STEP where the kind updates weights:
//     flush kinds (gpipe, 1f1b, interleaved, zb-h1): after the rank's last backward op of each
//       step, REDUCE_GRADS for each stage on the rank, then OPT_STEP for each (one flush, one step);
//     2bw: after the last backward of each batch of m microbatches, per stage;
//     pipedream: after every backward, per stage (replicated stages reduce across their replicas).
// Receives sit right before their use so that blocking receives can never deadlock a valid
// order; an executor may post them earlier (irecv) as an optimisation.
#pragma once
#include "pipeline/instr.h"

namespace baton::pipeline {

Program lower(const Program& compute_only);

}  // namespace baton::pipeline
