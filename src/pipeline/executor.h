// The pipeline executor (DESIGN §2, §4; docs/schedules.md "The executor"): runs this rank's
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
// Two ways to run:
// - flush kinds (gpipe, 1f1b, interleaved, zb-h1: W(t+1) = W(t) − lr·∇f(W(t)), notes-dissertation
//   §1.2, §1.5, §1.6; Qi et al. ZB-H1): `run` executes the whole list of a one-step program
//   (spec.steps = 1) once per optimizer step.
// - asynchronous kinds (pipedream, 2bw: notes-dissertation §1.3, §1.4; notes-pipedream §1): the
//   program covers many optimizer steps with no flush; `run_until_update(n)` executes the list up
//   to and including this rank's n-th OPT_STEP and returns with the pipeline still in flight
//   (posted receives and unfinished sends are kept for the next call). Before every compute op the
//   Stage is told the weight version the Instr names (`select_version`): weight stashing.
//
// Scatter/gather (PTD-P, notes-dissertation §3): with `ExecOptions::scatter_gather` (the stage's
// tensor-parallel group, tp > 1, no sequence parallelism) each tp rank sends only its 1/tp slice
// of a boundary tensor (activations and gradients are replicated over the tp group there) to the
// same tp rank of the peer stage, and the receiver all-gathers the slices over its tp group when
// the program waits for the message. Point-to-point bytes drop by tp (ExecStats::bytes_sent).
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "dist/comm.h"
#include "pipeline/instr.h"
#include "pipeline/timeline.h"

namespace baton::pipeline {

enum class BackwardPart : uint8_t {
  FULL,    // BWD: input and weight gradients
  INPUT,   // BWD_INPUT (zero bubble): the input gradient; the Stage keeps what WEIGHT needs
  WEIGHT,  // BWD_WEIGHT: the weight gradients INPUT deferred (same slot, later in the list)
};

// One pipeline rank's model as the executor sees it. `stage` is the Program's model stage
// (c·pp + r for chunk c of rank r); `slot` an activation slot of this rank.
class Stage {
 public:
  virtual ~Stage() = default;
  // Elements of the activation model stage `stage` sends to stage + 1 (and of the gradient that
  // comes back), per micro-batch, and their type (bf16 activations cross in bf16).
  virtual size_t boundary_count(int stage) const = 0;
  virtual DType boundary_dtype() const { return DType::F32; }
  // Buffers of a slot: the received input (RECV_ACT), the output to send (valid after FWD), the
  // received output gradient (RECV_GRAD) and the input gradient to send (valid after BWD/BWD_INPUT).
  virtual void* input(int stage, int slot) = 0;
  virtual void* output(int stage, int slot) = 0;
  virtual void* output_grad(int stage, int slot) = 0;
  virtual void* input_grad(int stage, int slot) = 0;
  // LOAD: the micro-batch's data into `slot` — its inputs on the first stage, its targets on the
  // last (which computes the loss).
  virtual void load(int stage, int microbatch, int slot) = 0;
  // Forward of `microbatch` (numbered over the whole program) through `stage`.
  virtual void forward(int stage, int microbatch, int slot) = 0;
  virtual void backward(int stage, int microbatch, int slot, BackwardPart part) = 0;
  // REDUCE_TIED, REDUCE_GRADS and OPT_STEP: the update of every stage the rank holds (`stage`
  // names the rank's first; for REDUCE_TIED its stage with tied layers).
  virtual void reduce_tied(int stage) = 0;
  virtual void reduce_grads(int stage) = 0;
  virtual void optimizer_step(int stage, int weight_version) = 0;
  // Weight stashing: the executor calls this before every compute op with the version its Instr
  // names (asynchronous kinds; flush programs name the current weights and may ignore it);
  // -1 = the current (latest) weights (evaluation).
  virtual void select_version(int /*stage*/, int /*weight_version*/) {}
  // ExecOptions::backwards_while_waiting: false while the forward of `microbatch` through `stage`
  // could not start without waiting (WSP: a pull that has not arrived gates it). Must not block.
  virtual bool forward_ready(int /*stage*/, int /*microbatch*/) { return true; }
};

// Wall-clock account of one run (seconds).
struct ExecStats {
  double total = 0;      // the whole run
  double compute = 0;    // FWD, BWD, BWD_INPUT, BWD_WEIGHT
  double recv_wait = 0;  // blocked waiting for a message (the bubble, as this rank sees it)
  double update = 0;     // REDUCE_GRADS, OPT_STEP
  double last_compute_end = 0;  // from the run's start to the end of the last compute op
  // Per chunk of this rank (model stage c·pp + r): summed time of its FWD, BWD or BWD_INPUT, and
  // BWD_WEIGHT ops (zero bubble's F, B and W costs, measured separately), and their counts.
  std::vector<double> fwd, bwd, wgt;
  std::vector<int> fwd_count, bwd_count, wgt_count;
  size_t bytes_sent = 0;        // point-to-point payload this rank sent (SEND_ACT, SEND_GRAD)
  int updates = 0;              // OPT_STEPs run
  std::vector<Instr> trace;     // the instructions run, in order (ExecOptions::record)
};

struct ExecOptions {
  // PTD-P scatter/gather: this rank's tensor-parallel group (size > 1), or null to send whole.
  dist::Comm* scatter_gather = nullptr;
  // Record every instruction as it runs (ExecStats::trace): tests check that what runs is exactly
  // the lowered program.
  bool record = false;
  // `run.trace`: every instruction with its wall-clock span, and the waits for earlier sends
  // (null: off, one branch per instruction).
  Timeline* timeline = nullptr;
  // A dynamic order (hetpipe under WSP; HetPipe §4–5: a VW's stages keep computing while a pull
  // gates the next minibatch): when this rank's next forward cannot start — its activation has not
  // arrived, or Stage::forward_ready says a pull gates it — the backward of the oldest minibatch it
  // has forwarded whose output gradient has arrived runs first (with its update: one group of the
  // list, up to its OPT_STEP), then the forward is tried again; while neither can run the rank
  // polls both. Backwards stay in minibatch order, forwards too; each minibatch reads the version
  // its Instr names. Updates happen earlier than the static list has them, so more versions are
  // alive at once: the ring is weight_ring_size_ahead (pipeline/stage_memory.h). One chunk per rank.
  bool backwards_while_waiting = false;
};

class Executor {
 public:
  // `program`: lowered and valid (checked again here); a flush kind with spec.steps = 1, or an
  // asynchronous kind (pipedream, also with replicated stages — 1F1B-RR —, 2bw) with any number of
  // steps. `rank`:
  // this rank's index in the program (= its rank in `comm`, the pipeline group).
  Executor(Program program, int rank, dist::Comm& comm, ExecOptions options = {});
  ~Executor();
  // Activation slots this rank needs: simulate's peak for the program (DESIGN §2).
  int slots() const { return slots_; }
  const Program& program() const { return program_; }
  const std::vector<Instr>& instructions() const { return program_.ranks[rank_]; }
  // Weight versions alive at once on this rank (the ring a Stage keeps): the largest
  // n − (oldest version read after OPT_STEP n) + 1 over the list; 1 for flush kinds.
  int weight_versions() const { return versions_; }
  // Flush kinds: runs this rank's instruction list once (one optimizer step).
  ExecStats run(Stage& stage);
  // Asynchronous kinds: continues the list up to and including this rank's `updates`-th OPT_STEP
  // counted from the program's start (or to the end), then returns with the pipeline in flight.
  ExecStats run_until_update(Stage& stage, int updates);
  bool finished() const { return pc_ >= instructions().size(); }
  // Asynchronous kinds: the run ends earlier than the program says (a stop agreed in the middle of
  // a segment). `shorter` — the same kind over fewer steps, lowered — replaces the program once the
  // instruction running now is done (or at once, between runs). Its list for this rank must begin
  // with every instruction already run, the one running included (checked: an internal error
  // otherwise): a 1F1B order cut after the forward of its last micro-batch is one. Receives posted
  // for micro-batches the shorter program does not have are withdrawn (Request::cancel); the ones
  // it keeps stay posted.
  void retarget(Program shorter);

  // Message tag of (kind, stage, microbatch), below the 32767 every MPI supports; messages with
  // equal tags between two ranks are never in flight together (their slots would overlap).
  static int tag(bool gradient, int stage, int microbatch, int num_stages);

 private:
  Program program_;
  int rank_;
  dist::Comm& comm_;
  int slots_ = 0;
  ExecOptions opt_;
  int versions_ = 1;
  std::vector<int> post_after_;  // per instruction: post this receive once instruction j ran (-1: at start)
  // Run state (kept across run_until_update calls).
  size_t pc_ = 0;
  bool started_ = false;
  int updates_done_ = 0;
  std::vector<dist::RequestPtr> recv_;                    // posted receives, by instruction
  std::map<int, std::vector<dist::RequestPtr>> sends_;  // in-flight sends, by slot
  std::vector<std::vector<int>> to_post_;                 // receives to post after instruction j
  std::unique_ptr<Program> pending_;                      // retarget(): applied after the current instruction
  std::vector<char> done_;                                // ran ahead of pc_ (backwards_while_waiting)

  void start(Stage& stage);
  // When each receive of the list may be posted (post_after_).
  void plan_posts();
  void apply_retarget(Stage& stage);
  void advance(Stage& stage, ExecStats& st, int stop_after_updates);
  // One instruction of the list (the body of advance's loop), timed into st; t0: the call's start.
  void execute(Stage& stage, ExecStats& st, size_t i, double t0);
  // backwards_while_waiting: whether instruction i starts a forward that cannot start yet, and the
  // first group of backward instructions after i that may run before it (its first and one past its
  // last index; empty when none: its gradient has not arrived, or there is no such group).
  bool forward_waits(Stage& stage, size_t i);
  std::pair<size_t, size_t> backward_ahead(size_t i, bool* pending);
  // The pieces of advance: a receive's wait (and scatter/gather), a send (returns its bytes), a
  // compute op (timed into st).
  void receive(Stage& stage, size_t i);
  size_t send(Stage& stage, const Instr& in);
  void compute(Stage& stage, const Instr& in, ExecStats& st, double start);
  void post(Stage& stage, int i);
  // Both return whether there was a send to wait for.
  bool wait_sends(int slot);
  bool wait_all_sends();
  // After a wait for sends that began at `start`: with a timeline, the wait on it and the time now
  // (where the instruction's own span starts); without, `start`.
  double after_send_wait(bool waited, const Instr& in, double start);
  // Where a boundary message's payload starts and how many floats it has (a 1/tp slice under
  // scatter/gather).
  std::pair<size_t, size_t> payload(size_t floats) const;
};

// Forward only (evaluation): every micro-batch through every model stage in order (LOAD on the
// first and last stage, FWD), with blocking point-to-point between neighbouring ranks (stage s runs
// on rank s mod pp), all in one slot.
// `slot`: the activation slot to use (one the training program does not, when an asynchronous
// program is in flight); `comm` should then be a separate communicator (e.g. a split of the
// pipeline group) so that its messages never match the in-flight program's receives.
void run_forward_only(Stage& stage, dist::Comm& comm, int pp, int vp, int microbatches, int slot = 0);

}  // namespace baton::pipeline
