// Validation: the invariants every Program must satisfy, checked from the instructions alone
// (independently of how the generator built them). On a compute-only program:
// - every op runs on the rank that owns its (stage, microbatch) (Program::rank_of);
// - every (stage, microbatch) of the program has exactly one FWD and then either one BWD or one
//   BWD_INPUT followed by one BWD_WEIGHT;
// - activation slots: a FWD (or the RECV_ACT feeding it) takes a slot that is free, every later op
//   of that (stage, microbatch) names the same slot, and the slot is free again only once the
//   backward is complete (and, when lowered, its input gradient has been sent);
// - the backward ops read the weight version their FWD read (weight stashing).
// On a lowered program, additionally:
// - each FWD of a stage > 0 is preceded by its RECV_ACT and each FWD of a non-last stage followed
//   by its SEND_ACT (likewise RECV_GRAD / SEND_GRAD around BWD / BWD_INPUT), and every send is
//   matched by exactly one receive on its peer for the same (kind, microbatch, neighbouring
//   stage) — which fixes the tensor's shape — naming the sender as its peer;
// - each FWD of the first and the last stage is preceded by its LOAD (after the RECV_ACT);
// - REDUCE_GRADS / OPT_STEP name the rank's first stage and update all its stages: OPT_STEP n
//   produces version n, after a REDUCE_GRADS and, on a rank holding one of Program::tied_stages,
//   after a REDUCE_TIED naming its first tied stage; the ranks that reduce tied gradients together
//   (same replica index) do so equally often;
// - forwards read an existing version: flush kinds the latest with nothing in flight at an update;
//   pipedream the latest (vertical sync: the one the input stage read for that microbatch);
//   2bw max(⌊k/m⌋ − 1, 0) for 0-based microbatch k, with at most two versions live per stage;
// - each stage is updated once per step (flush, 2bw) or once per backward (pipedream).
// Deadlock freedom is `simulate`'s job.
#pragma once
#include <string>
#include <vector>

#include "pipeline/instr.h"

namespace baton::pipeline {

// Every violated invariant, one message each (empty: valid). Stops after `max_problems`.
std::vector<std::string> validate(const Program& p, size_t max_problems = 20);

// validate, throwing an Error that lists the first problems.
void check_valid(const Program& p);

}  // namespace baton::pipeline
