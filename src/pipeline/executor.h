// The pipeline executor (DESIGN §2, §4; docs/schedules.md "For the executor"): runs this rank's
// instruction list of a lowered, validated Program — one switch over Op — with asynchronous
// point-to-point messages on the pipeline communicator. It knows Instr, dist::Comm and the narrow
// Stage interface below, never a concrete model.
//
// Invariants it relies on (checked by `validate`, deadlock freedom by `simulate`):
// - SEND_ACT(s, k) pairs with RECV_ACT(s + 1, k) on the peer, SEND_GRAD(s, k) with RECV_GRAD(s − 1, k);
//   (kind, stage, microbatch) fixes a message's shape, so it also gives its tag;
// - a slot is free when its RECV_ACT / FWD runs and stays owned by one (stage, microbatch) until
//   the op that completes its backward.
// Receives are posted as early as their buffer allows (right after the last earlier instruction
// on the same slot) and waited where the program has them; sends are waited before their slot's
// buffers are next computed into, and at the end of the run.
//
// Flush kinds only (gpipe, 1f1b, interleaved, zb-h1: W(t+1) = W(t) − lr·∇f(W(t)), notes-dissertation
// §1.2, §1.5, §1.6; Qi et al. ZB-H1): the program is one optimizer step (spec.steps = 1) run once per
// step, and the Stage may serve all of a rank's REDUCE_GRADS / OPT_STEP with one reduction and one
// optimizer call. Weight stashing (pipedream, 2bw) is not implemented: the constructor refuses them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "dist/comm.h"
#include "pipeline/instr.h"

namespace baton::pipeline {

enum class BackwardPart : uint8_t {
  FULL,    // BWD: input and weight gradients
  INPUT,   // BWD_INPUT (zero bubble): at least the input gradient
  WEIGHT,  // BWD_WEIGHT: whatever weight gradient INPUT deferred
};

// One pipeline rank's model as the executor sees it. `stage` is the Program's model stage
// (c·pp + r for chunk c of rank r); `slot` an activation slot of this rank.
class Stage {
 public:
  virtual ~Stage() = default;
  // Floats of the activation model stage `stage` sends to stage + 1 (and of the gradient that
  // comes back), per micro-batch.
  virtual size_t boundary_floats(int stage) const = 0;
  // Buffers of a slot: the received input (RECV_ACT), the output to send (valid after FWD), the
  // received output gradient (RECV_GRAD) and the input gradient to send (valid after BWD/BWD_INPUT).
  virtual float* input(int stage, int slot) = 0;
  virtual float* output(int stage, int slot) = 0;
  virtual float* output_grad(int stage, int slot) = 0;
  virtual float* input_grad(int stage, int slot) = 0;
  // Forward of `microbatch` (0-based within the step) through `stage`: the first stage loads the
  // micro-batch's tokens, the last one its targets and computes the loss.
  virtual void forward(int stage, int microbatch, int slot) = 0;
  virtual void backward(int stage, int microbatch, int slot, BackwardPart part) = 0;
  // REDUCE_GRADS and OPT_STEP of `stage` (flush kinds: a rank's come together at the step's end).
  virtual void reduce_grads(int stage) = 0;
  virtual void optimizer_step(int stage, int weight_version) = 0;
};

// Wall-clock account of one run (seconds).
struct ExecStats {
  double total = 0;      // the whole run
  double compute = 0;    // FWD, BWD, BWD_INPUT, BWD_WEIGHT
  double recv_wait = 0;  // blocked waiting for a message (the bubble, as this rank sees it)
  double update = 0;     // REDUCE_GRADS, OPT_STEP
  double last_compute_end = 0;  // from the run's start to the end of the last compute op
  std::vector<double> fwd, bwd;  // per model stage of this rank: summed time of its FWD / BWD ops
  std::vector<int> fwd_count, bwd_count;
};

class Executor {
 public:
  // `program`: lowered and valid (checked again here), flush kind, spec.steps = 1. `rank`: this
  // rank's index in the program (= its rank in `comm`, the pipeline group).
  Executor(Program program, int rank, dist::Comm& comm);
  // Activation slots this rank needs: simulate's peak for the program (DESIGN §2).
  int slots() const { return slots_; }
  const Program& program() const { return program_; }
  const std::vector<Instr>& instructions() const { return program_.ranks[rank_]; }
  // Runs this rank's instruction list once (one optimizer step).
  ExecStats run(Stage& stage);

  // Message tag of (kind, stage, microbatch), below the 32767 every MPI supports; messages with
  // equal tags between two ranks are never in flight together (their slots would overlap).
  static int tag(bool gradient, int stage, int microbatch, int num_stages);

 private:
  Program program_;
  int rank_;
  dist::Comm& comm_;
  int slots_ = 0;
  std::vector<int> post_after_;  // per instruction: post this receive once instruction j ran (-1: at start)
};

// Forward only (evaluation): every micro-batch through every model stage in order, with blocking
// point-to-point between neighbouring ranks (stage s runs on rank s mod pp), all in slot 0.
void run_forward_only(Stage& stage, dist::Comm& comm, int pp, int vp, int microbatches);

}  // namespace baton::pipeline
