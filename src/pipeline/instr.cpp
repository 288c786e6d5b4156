// Op names and the rank <-> stage layout of a Program (see instr.h for the conventions).
#include "pipeline/instr.h"


#include "core/error.h"
#include "pipeline/schedules.h"

namespace baton::pipeline {

namespace {
constexpr std::string_view kNames[kNumOps] = {
    "FWD",       "BWD",       "BWD_INPUT", "BWD_WEIGHT",   "SEND_ACT", "RECV_ACT",
    "SEND_GRAD", "RECV_GRAD", "REDUCE_GRADS", "OPT_STEP",  "LOAD",     "REDUCE_TIED"};
// Text-form mnemonics: the compute ops are one letter (F, B, I = input gradient, W = weight
// gradient, as in the zero-bubble paper's figures); the rest keep their names.
constexpr std::string_view kMnemonics[kNumOps] = {
    "F",         "B",         "I",            "W",        "SEND_ACT", "RECV_ACT",
    "SEND_GRAD", "RECV_GRAD", "REDUCE_GRADS", "OPT_STEP", "LOAD",     "REDUCE_TIED"};
}  // namespace

std::string_view op_name(Op op) { return kNames[static_cast<int>(op)]; }
std::string_view op_mnemonic(Op op) { return kMnemonics[static_cast<int>(op)]; }

bool is_compute(Op op) {
  return op == Op::FWD || op == Op::BWD || op == Op::BWD_INPUT || op == Op::BWD_WEIGHT;
}
bool is_update(Op op) { return op == Op::REDUCE_GRADS || op == Op::OPT_STEP || op == Op::REDUCE_TIED; }

bool is_comm(Op op) {
  return op == Op::SEND_ACT || op == Op::RECV_ACT || op == Op::SEND_GRAD || op == Op::RECV_GRAD;
}

const ScheduleTraits& Program::traits() const { return schedule_traits(spec.kind); }

// One pipeline's rank ↔ stage arithmetic lives in core/pipeline_ranks.h (shared with the Layout).
PipelineRanks Program::layout() const { return {.pp = spec.pp, .vp = spec.vp, .replicas = spec.replicas}; }

int Program::replicas(int stage) const {
  BATON_ASSERT(stage >= 0 && stage < num_stages(), "stage {} out of range", stage);
  return layout().replicas_of(stage % spec.pp);
}

int Program::num_ranks() const { return layout().ranks(); }

int Program::first_rank(int stage) const {
  BATON_ASSERT(stage >= 0 && stage < num_stages(), "stage {} out of range", stage);
  return layout().first_rank(stage % spec.pp);  // chunk c of rank r is stage c·pp + r
}

int Program::rank_of(int stage, int microbatch) const { return layout().rank_of(stage, microbatch); }

std::vector<int> Program::stages_of(int rank) const { return layout().model_stages(rank); }

}  // namespace baton::pipeline
