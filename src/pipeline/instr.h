// The pipeline IR (DESIGN §4 "Pipeline schedules are data"): a Program is the whole instruction
// list of every rank of one pipeline, produced by a generator (schedules.h), completed by `lower`,
// checked by `validate`, costed by `simulate` and finally run by the executor, which is one switch
// over Op. Pure data: no model, no communicator, no globals.
//
// Indexing conventions (used everywhere in src/pipeline and in the text form):
// - `stage` is the *model* stage, 0 .. pp·vp − 1. With interleaving (vp > 1) model stage
//   s = c·pp + r is chunk c of rank r (PTD-P, notes-dissertation §1.6). With PipeDream's replicated
//   stages the stages are laid out on consecutive ranks and microbatch k runs on replica k mod r_s
//   (1F1B-RR, notes-pipedream §1).
// - `microbatch` is 0-based and global over the whole program: step t (optimizer step t for flush
//   schedules and 2BW) holds microbatches t·m .. t·m + m − 1.
// - `weight_version` n means "this stage's weights after n optimizer steps" (W(n) in the papers).
// - `slot` indexes this rank's activation arena; one slot holds the stashed activations of one
//   (stage, microbatch) from its LOAD / RECV_ACT / FWD until its last backward op.
// - REDUCE_GRADS, OPT_STEP and REDUCE_TIED act on every model stage the rank holds (an update is
//   per rank: with interleaving all its chunks update together); their `stage` names the rank's
//   first (for REDUCE_TIED: the rank's stage with tied layers).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/pipeline_ranks.h"

namespace baton::pipeline {

enum class Op : uint8_t {
  FWD,           // forward of (stage, microbatch); allocates `slot`
  BWD,           // full backward (input and weight gradients); frees `slot`
  BWD_INPUT,     // zero-bubble split: input gradient only (critical path)
  BWD_WEIGHT,    // zero-bubble split: weight gradient (deferrable); frees `slot`
  SEND_ACT,      // send stage's output activation of microbatch to `peer` (runs stage + 1)
  RECV_ACT,      // receive stage's input activation of microbatch from `peer` (runs stage − 1)
  SEND_GRAD,     // send the gradient w.r.t. stage's input to `peer` (runs stage − 1)
  RECV_GRAD,     // receive the gradient w.r.t. stage's output from `peer` (runs stage + 1)
  REDUCE_GRADS,  // reduce the rank's gradients (data-parallel and stage replicas), norm, clipping
  OPT_STEP,      // optimizer step of the rank's stages; produces `weight_version`
  LOAD,          // load microbatch's data (inputs on the first stage, targets on the last) into `slot`
  REDUCE_TIED,   // sum the gradients of parameters shared with other stages (tied layers)
};
inline constexpr int kNumOps = 12;

// Long names ("FWD", "SEND_ACT", ...) and the short text-form mnemonics ("F", "SEND_ACT", ...).
std::string_view op_name(Op op);
std::string_view op_mnemonic(Op op);

bool is_compute(Op op);  // FWD, BWD, BWD_INPUT, BWD_WEIGHT
bool is_comm(Op op);     // SEND_*, RECV_*
bool is_update(Op op);   // REDUCE_TIED, REDUCE_GRADS, OPT_STEP (no microbatch)

struct Instr {
  Op op = Op::FWD;
  int stage = 0;           // model stage (see above)
  int microbatch = -1;     // -1 for REDUCE_GRADS / OPT_STEP
  int slot = -1;           // activation slot on this rank, -1 when none
  int weight_version = 0;  // weights this op reads (FWD/BWD*) or produces (OPT_STEP)
  int peer = -1;           // the other rank of a SEND/RECV, -1 otherwise
  bool operator==(const Instr&) const = default;
};

struct ScheduleSpec {
  std::string kind = "1f1b";
  int pp = 1;                 // pipeline stages (ranks, without replication)
  int vp = 1;                 // model chunks per rank (interleaved only)
  int microbatches = 1;       // per optimizer step (flush schedules, 2bw); per "step" otherwise
  int steps = 1;              // optimizer steps (batches) the program covers
  std::vector<int> replicas;  // pipedream: workers per stage (empty = 1 each)
  bool vertical_sync = false; // pipedream: every stage uses the input stage's version
  int nm = 0;                 // hetpipe: Nm minibatches in flight (HetPipe §4); 0 = pp
  bool operator==(const ScheduleSpec&) const = default;
};

// How a kind updates weights (DESIGN §4 "Update semantics"; the papers' rules):
enum class UpdateRule : uint8_t {
  FLUSH,           // W(t+1) = W(t) − lr·∇f(W(t)): one update per batch, after a flush
  PER_BATCH,       // PipeDream-2BW: one update per batch, computed on W(t − 1), no flush
  PER_MICROBATCH,  // PipeDream: an update per micro-batch, forwards read the stashed latest version
  PER_WAVE,        // HetPipe WSP: a virtual worker pushes one update per wave of Nm micro-batches
};
std::string_view update_rule_name(UpdateRule r);  // "flush", "per batch", ...

// What every consumer of a kind needs to know about it, so that nothing outside the registry
// compares kind names (config validation, lowering, validation, the executor, the trainer and the
// planner read these).
struct ScheduleTraits {
  std::string_view name;
  UpdateRule update = UpdateRule::FLUSH;
  int weight_versions = 1;       // versions a stage keeps: 1 (flush), 2 (2bw), 0 = one per
                                 // micro-batch in flight (pipedream's stashing)
  bool interleaving = false;     // vp > 1 allowed (interleaved 1F1B)
  bool replicas = false;         // replicated stages allowed (PipeDream's 1F1B-RR)
  bool vertical_sync = false;    // the vertical-sync option applies (PipeDream §3.3)
  bool split_backward = false;   // BWD_INPUT / BWD_WEIGHT (zero bubble)
  bool min_microbatches_pp = false;  // needs at least pp micro-batches per batch (2 versions)
  bool in_flight_nm = false;     // ScheduleSpec::nm sets the minibatches in flight (hetpipe)
  bool generated = true;         // has a generator (baton schedule, simulate, the planner)
  bool executable = true;        // baton train runs it
  std::string_view summary;      // one line for help texts and errors

  bool synchronous() const { return update == UpdateRule::FLUSH; }
};

struct Program {
  ScheduleSpec spec;
  bool lowered = false;                   // true once `lower` added communication and updates
  // Lowered: the model stages holding layers whose parameters other stages share (their ranks
  // REDUCE_TIED before every update; LowerOptions::tied_stages). Text form: `tied=0,3`.
  std::vector<int> tied_stages;
  std::vector<std::vector<Instr>> ranks;  // ranks[r] = rank r's instructions in execution order

  // The kind's traits (the registry's, schedules.h): update rule, weight versions, options.
  const ScheduleTraits& traits() const;
  int num_stages() const { return spec.pp * spec.vp; }
  int num_ranks() const;
  int total_microbatches() const { return spec.microbatches * spec.steps; }
  PipelineRanks layout() const;          // the pipeline's rank ↔ stage arithmetic (core)
  int replicas(int stage) const;         // workers running `stage` (1 unless pipedream replicates)
  int first_rank(int stage) const;       // the rank of replica 0 of `stage`
  int rank_of(int stage, int microbatch) const;
  std::vector<int> stages_of(int rank) const;  // model stages on `rank`, ascending
  bool operator==(const Program&) const = default;
};

}  // namespace baton::pipeline
