// What one pipeline rank of the trainer allocates on its device, as a formula: the one model of a
// stage's memory, used by the HetPipe planner (plan/hetpipe.h: Max_m and the partition's memory
// constraint, HetPipe §4, notes-hetpipe-madpipe §A.2/§A.5) and held to the runtime's allocations
// byte for byte by tests (tests/unit/test_stage_memory.cpp builds the runtime's objects and compares;
// tests/e2e/test_plan_hetpipe_memory.sh trains under hetero.memory_limit). The counts that depend
// on the schedule — activation slots and weight versions — come from the same functions the trainer
// sizes itself with (weight_ring_size in the Executor, kEvaluationSlots in the StepRunner).
//
// Every allocation the trainer makes through Backend::alloc for a rank (and so every byte the
// memory-limit emulation counts), each rounded up to the backend's granularity:
// - the model (model/sequential_model.cpp): fp32 master weights and fp32 gradients, F floats each
//   (the flat buffer: every tensor 16-float aligned, padded to 16); a compute copy of F act-dtype
//   values when compute is not fp32; the non-trainable buffers (batch-norm statistics); the loss
//   accumulators (1 + the model's metrics, doubles);
// - the optimizer (optim/): its state tensors of F floats each (AdamW m and v: 2; SGD with
//   momentum: 1; plain SGD: none; at least one float each);
// - the weight stash of an asynchronous schedule (train/loop/weight_versions.h): V fp32 copies of
//   the weights (+ their compute copies under bf16); V = 0 for a flush program, which keeps none;
// - the activation arena (SequentialModel::reserve), per slot: every layer's saved tensors (each
//   256-byte aligned), three boundary buffers when the rank holds part of the model (the received
//   input, the received output gradient, the input gradient to send: each as large as the larger of
//   the stage's input and output), the micro-batch's inputs on the first stage and its targets on the
//   last; once: the largest layer workspace and two buffers of the largest layer output.
// Not counted, because it is not device memory: the parameter server's shard on the rank (an MPI
// window in host memory, (D + 2) × the shard's floats: dist/param_server.h) and WSP's host copies
// of the weights (train/hetero/wsp_stage.h). Recomputation and split backward (zero bubble) are not
// modelled: the HetPipe planner needs neither.
#pragma once
#include <cstddef>
#include <span>
#include <vector>

#include "pipeline/instr.h"

namespace baton::pipeline {

// One layer as the trainer allocates for it, per micro-batch.
struct LayerBytes {
  size_t param_floats = 0;   // its ParamTable's total rounded up to 16 floats (its share of F)
  size_t buffer_floats = 0;  // its non-trainable buffers, rounded up to 16 floats
  size_t saved = 0;          // Layer::saved_bytes: kept from forward to backward
  size_t in = 0;             // Layer::input_bytes
  size_t out = 0;            // Layer::output_bytes
  size_t work = 0;           // Layer::workspace_bytes
};

// What does not depend on the stage's layers.
struct StageContext {
  size_t input_bytes = 0;    // a micro-batch's inputs (token ids or images), on the first stage
  size_t target_bytes = 0;   // a micro-batch's targets, on the last stage
  int act_size = 4;          // bytes of an activation in the compute dtype (fp32 4, bf16 2)
  int metrics = 0;           // the model's metrics besides the loss (ModelBuilder::metric_names)
  int optimizer_states = 0;  // state tensors per parameter (AdamW 2, SGD with momentum 1, else 0)
  // Backend::alloc's rounding: the CPU backend's 64 bytes (the memory-limit emulation's); the CUDA
  // arena rounds to 256, at most 192 bytes more per allocation, inside the planner's overhead.
  size_t granularity = 64;
};

// The schedule's counts for the rank.
struct StageCounts {
  int slots = 1;            // activation slots
  int weight_versions = 0;  // weight stash ring (0: a flush program keeps no stash)
};

// Bytes by purpose (each allocation rounded).
struct StageMemory {
  size_t weights = 0;      // fp32 masters, compute copy, non-trainable buffers, loss accumulators
  size_t gradients = 0;
  size_t optimizer = 0;
  size_t versions = 0;     // the weight stash
  size_t activations = 0;  // slots, workspace, output buffers
  size_t total() const { return weights + gradients + optimizer + versions + activations; }
};

// `layers`: the stage's layers in model order; `first` / `last`: it holds the model's first / last
// layer (both: the whole model, no boundary buffers).
StageMemory stage_memory(std::span<const LayerBytes> layers, bool first, bool last, const StageContext& ctx,
                         const StageCounts& counts);

// The ring of weight versions a rank keeps for its lowered asynchronous instruction list
// (Executor::weight_versions): the largest n − (oldest version a later compute op reads) + 1 over
// its OPT_STEPs n; 1 when it has none.
int weight_ring_size(const std::vector<Instr>& list);
// The same for a rank that runs backwards ahead of a waiting forward (ExecOptions::
// backwards_while_waiting): the ring of the list with every backward group moved as early as that
// allows (backwards_first), which bounds every order the executor can take.
int weight_ring_size_ahead(const std::vector<Instr>& list);
// `list` with each backward group (from a RECV_GRAD or BWD to its OPT_STEP) moved before the first
// forward (RECV_ACT or FWD) of a later micro-batch that precedes it: the earliest order
// backwards_while_waiting can produce.
std::vector<Instr> backwards_first(const std::vector<Instr>& list);

// The StepRunner reserves, for an asynchronous program, one activation slot more than the
// schedule's peak: evaluation runs in it while the program is in flight.
inline constexpr int kEvaluationSlots = 1;

// Stage `stage` of a virtual worker of `pp` stages at Nm minibatches in flight, as the trainer
// sizes it for a run long enough to reach the steady state (train.steps ≥ pp + 1 + 2·Nm): pp > 1
// runs the `hetpipe` program (one micro-batch per minibatch): the peak of its slots + evaluation's,
// and its weight ring (Nm on every stage); pp = 1 a flush program per minibatch: one slot, no stash.
StageCounts hetpipe_stage_counts(int pp, int nm, int stage);
// Every stage's, from one program.
std::vector<StageCounts> hetpipe_stage_counts(int pp, int nm);

}  // namespace baton::pipeline
