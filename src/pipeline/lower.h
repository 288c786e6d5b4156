// Lowering: a generator's compute-only Program -> the Program the executor runs, instruction for
// instruction (the executor merges nothing and adds nothing). Adds, per rank:
// - RECV_ACT right before each FWD of a stage > 0 and SEND_ACT right after each FWD of a stage
//   that is not the last; RECV_GRAD right before each BWD/BWD_INPUT of a stage that is not the
//   last and SEND_GRAD right after it for a stage > 0. Peers follow Program::rank_of (1F1B-RR).
// - LOAD right before each FWD of the first and of the last model stage (the micro-batch's inputs
//   and targets), after the RECV_ACT so that the receive is posted as early as its slot allows.
// - the update where the kind's update rule (Program::traits) puts it, as REDUCE_GRADS + OPT_STEP
//   for every model stage of the rank together (`stage` = the rank's first), preceded by
//   REDUCE_TIED on the ranks holding a stage of `tied_stages`:
//     FLUSH (gpipe, 1f1b, interleaved, zb-h1): after the rank's last backward op of each step;
//     PER_BATCH (2bw, 1f1b-star): after the last backward of each batch of m microbatches;
//     PER_MICROBATCH (pipedream): after every backward (replicated stages reduce across their
//       replicas in REDUCE_GRADS).
// Receives sit right before their use so that blocking receives can never deadlock a valid
// order; an executor may post them earlier (irecv) as an optimisation.
#pragma once
#include <vector>

#include "pipeline/instr.h"

namespace baton::pipeline {

struct LowerOptions {
  // Model stages holding layers whose parameters other stages also hold (a GPT's first and last
  // stage share the tied token embedding). Empty: nothing shared across stages.
  std::vector<int> tied_stages;
};

Program lower(const Program& compute_only, const LowerOptions& options = {});

}  // namespace baton::pipeline
