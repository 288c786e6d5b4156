// WSP on one stage rank of a virtual worker (HetPipe §4–§5; docs/hetpipe.md "Training with WSP"):
// the one WSP worker, for VWs of one stage and of several. The step path calls it (UpdateHooks,
// train/loop/step_runner.h) before each of the rank's forwards and after each of its updates; a VW of
// several stages runs the `hetpipe` schedule (Nm minibatches in flight, minibatch p on the local
// updates 1 … p − Nm; pipeline/schedules.cpp), a VW of one stage a flush program per minibatch
// (every minibatch on the latest weights — the paper's "a new minibatch uses the latest w_local";
// with one stage nothing is in flight beside it).
//
// Roles (WspStage::make): by default (hetero.placement = "default") the VW's first stage is its
// client of the parameter server (the leader) and the other stages (followers) talk to it over the
// VW's communicator; with hetero.placement = "local" (HetPipe §8.1's ED-local) every stage is a
// client of its own (a local client) for the tensors it holds.
// - push (end of wave c, on every stage as its update of minibatch (c+1)·Nm finishes): the
//   stage's wave update ũ_s = its latest weights − its weights at the wave's start (every update
//   of the wave, on its layers). A follower sends its part to the leader (followers finish the
//   wave first: backwards run from the last stage to the first); the leader's own finish completes
//   the wave and it pushes the VW's whole ũ once (one push per VW and wave, as §5 says). A tied
//   parameter held by two stages (a GPT's wte) is pushed by the stage of its lowest layer only:
//   the copies receive identical updates. A local client pushes its owned tensors itself (the
//   server completes the VW's wave when all parts arrived: dist/param_server.h).
// - pull (end of clock c ≥ D, gating minibatch (c+2)·Nm): the leader reads w_global as of
//   c_global = X (as soon as the server allows, or blocking at its forward of (c+2)·Nm) and sends
//   every follower X and its layers' part, which the follower merges right before its own forward
//   of (c+2)·Nm: every stage of a VW merges the same X, so a minibatch's weights are one version
//   of the model across the pipeline. A local client pulls its held tensors itself and may merge
//   another X than its VW's other stages (each keeps the staleness bound; a minibatch's weights
//   may then mix versions across stages, as in the paper, whose stages talk to their node's server).
// - merge (the rule of docs/hetpipe.md rule 6): the version b = (c+1)·Nm (the end of wave c, which
//   minibatch (c+2)·Nm reads under hetpipe) becomes w_global(X) + the stage's own pushed waves ≥ X
//   (the server holds them back until every VW pushed them), and every later version the stage
//   holds — stashed ones of a pipeline, or the latest of a one-stage VW — moves by the same Δ:
//   v ← v + (w_global(X) + own unfolded waves − version b). Versions < b (read by minibatches of
//   wave c+1 that started before the pull) are untouched. Minibatch 11 of the paper's D = 0,
//   Nm = 4 example reads version 7 = global 1–4 (X = 1, merged at b = 4) plus own 5–7.
//
// Stopping (docs/hetpipe.md "Stopping a run"): VWs are at different minibatches, so a stop cannot
// be a collective after "the current step". A rank asked to stop (SIGTERM/SIGINT) posts its
// completed waves w on the job's StopBoard (write-once); every stage reads the board right before
// each minibatch starts (after the pull that gated it) and stops at S = (w + D + 2)·Nm, a wave's
// end whose clock pulls. No VW can have started a minibatch beyond S: when w was posted, c_global
// ≤ w (the poster had pushed w waves), and a minibatch k = (c+2)·Nm needs c_global ≥ c − D + 1,
// so every VW had started fewer than (c_global + D + 2)·Nm; every later start read the board
// first. A pipelined stage cuts its program at S (the pipeline drains there: StepRunner), all VWs
// meet at S as at a checkpoint and save, and the run ends (exit 130). In deterministic mode the
// order of turns is only cut at checkpoints, so a stop waits for the next one.
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "core/timer.h"
#include "dist/comm.h"
#include "dist/layout.h"
#include "dist/param_server.h"
#include "dist/server_client.h"
#include "dist/stop_board.h"
#include "model/sequential_model.h"
#include "pipeline/timeline.h"
#include "train/hetero/compute_stretch.h"
#include "train/hetero/wsp_trace_file.h"
#include "train/loop/step_runner.h"
#include "wsp/worker_clock.h"

namespace baton {

class WspTurns;

// The parameters of the whole model in one flat layout that every rank agrees on (every layer's
// add_params in global layer order, the tied ones once): the parameter server's tensors.
struct GlobalParams {
  ParamTable table;
  std::vector<int> layer;  // per tensor: the global layer that adds it first (a tied one's lowest)
  std::vector<dist::TensorSpan> spans() const;
  size_t floats() const { return table.total(); }
};
GlobalParams global_params(const ModelBuilder& builder, const Backend& be);

// hetero.placement = "local" (HetPipe §8.1's ED-local): each tensor's shard is the rank of a stage
// that owns it — the stage holding its (lowest) layer — taking the VWs in turn (tensor i in VW
// i mod N), so with ED's identical VWs, whose stage s all sit on node s, every stage pushes and
// pulls its layers on its own node.
std::vector<int> local_placement(const GlobalParams& global, const dist::Layout& layout);

// The version vector of w_global as of c_global plus the VW's own pushed waves beyond it (what a
// merge of a pull holds): every VW's minibatches 1 … c_global·Nm and own 1 … pushed·Nm.
wsp::VersionVector pulled_version(int num_vw, int64_t c_global, int vw, int pushed, int nm);
// How many of the newest minibatch indices 1 … p − 1 some VW's updates are missing from `w`.
int observed_staleness(const wsp::VersionVector& w, int p, int num_vw);

struct WspStageSetup {
  int vw = 0, num_vw = 1;
  wsp::WspParams params;
  int64_t minibatches = 0;        // the run's (train.steps)
  dist::Comm* vw_comm = nullptr;  // the VW's stages, rank = stage
  const ComputeStretch* stretch = nullptr;  // this rank's emulated device (null: none)
  bool local_client = false;  // hetero.placement = "local": every stage its own server client
  bool background = false;    // the clients' pushes and pulls on a thread (dist/server_client.h)
  WspTurns* turns = nullptr;  // deterministic mode, on a VW's first stage: its turns (wsp_turns.h)
  bool reorder = false;       // backwards may run while a forward waits (not in deterministic mode)
  dist::StopBoard* board = nullptr;        // where stops are posted (null: stops only at meetings)
  pipeline::Timeline* timeline = nullptr;  // run.trace: push, pull and server-wait spans
};

// What a pull brings a stage: c_global X it is as of, and the stage's part of w_global (its held
// tensors, in its local flat layout).
struct Pulled {
  int64_t x = 0;
  std::vector<float> part;
};

class WspStage : public UpdateHooks {
 public:
  // The rank's role in its VW (see the file comment): leader, follower or local client.
  static std::unique_ptr<WspStage> make(const WspStageSetup& setup);
  ~WspStage() override;
  WspStage(const WspStage&) = delete;
  WspStage& operator=(const WspStage&) = delete;

  // Where the run starts: wave `first_wave` (0, or a resumed run's first: train/hetero/wsp_checkpoint.h,
  // every VW's waves before it in the weights; the server counts from it). Before bind().
  void start_at(int first_wave);
  void set_timeline(pipeline::Timeline* timeline) { s_.timeline = timeline; }
  // run.trace: this stage's events and the version vectors its weights carry (wsp_trace_file.h).
  void set_trace(std::unique_ptr<WspTraceFile> trace, bool deterministic);

  // Once the stage's model exists (collective over the VW): maps its tensors into the global
  // layout and opens this stage's client of `server` (a leader's for the whole model, a local
  // client's for its tensors); the VW's first stage gathers w0 of the whole model into `w0`
  // (other stages: untouched). `server` must outlive this object's finish().
  void bind(SequentialModel& model, const GlobalParams& global, dist::ParamServer& server, std::vector<float>& w0);

  void before_forward(int64_t minibatch, int64_t reads, WeightVersions* versions, int64_t base) override;
  // False while the pull that gates `minibatch` has not returned (it is then kept for
  // before_forward); never blocks. A follower's gate is its leader's, which has passed by the time
  // the minibatch's activation arrives: always true there.
  bool forward_ready(int64_t minibatch) override;
  // Backwards may run while a forward waits (pipeline::ExecOptions::backwards_while_waiting) —
  // except in deterministic mode, whose turns fix the order.
  bool reorders() const override { return s_.reorder; }
  void after_update(int64_t update, WeightVersions* versions, int64_t base) override;
  void after_compute(int64_t minibatch, WorkTime t) override;
  std::optional<int64_t> end_at() const override { return stop_at_; }

  // A checkpoint's meeting (train/hetero/wsp_checkpoint.h), every VW drained at a wave's end: takes the
  // outstanding pull (from the server, or a follower from its leader) and sets this stage's
  // weights — the model's parameters, from which the next segment's stash starts — to its part of
  // w_global. Returns false (and does nothing) when no pull is outstanding (the end of a clock < D).
  bool merge_at_meeting();
  // The pushes handed to this stage's client are on the server (before a checkpoint's meeting).
  void drain();
  // Completes the messages still in flight and closes the client (end of the run).
  void finish();
  // run.trace: the bytes this stage moved for WSP over the run — to and from each shard of
  // `server` and to each stage of its VW (a follower's ũ parts, a leader's pull parts).
  void trace_traffic(const dist::ParamServer& server);

  // This process was asked to stop (SIGINT/SIGTERM): posts its completed waves on the board (the
  // first post counts). Without a board (deterministic mode) a no-op: the next meeting stops.
  void post_stop();
  // The minibatch the run stops after, once a posted stop is known (and before train.steps).
  std::optional<int64_t> stop_at() const { return stop_at_; }
  // A stop was posted (whether or not it comes before the run's end).
  bool stop_posted() const { return stop_posted_; }

  // For the metrics of the minibatch that started last on this stage.
  int clock() const { return clock_.c_local(); }
  int c_global() const { return static_cast<int>(c_global_); }
  int staleness() const { return staleness_; }
  // The VW's waiting is its first stage's (followers learn it with each pull their leader sends):
  // wait = from the end of a clock (the pull's request, at the wave's push) to the pull's return,
  // idle = the part of it the stage was blocked (the rest ran the next wave's first minibatches).
  double take_wait() { return std::exchange(wait_, 0.0); }
  double take_idle() { return std::exchange(idle_, 0.0); }
  double take_push() { return std::exchange(push_, 0.0); }
  double take_stretch() { return std::exchange(stretched_, 0.0); }
  double slowdown(int64_t minibatch) const { return s_.stretch ? s_.stretch->factor(minibatch) : 1.0; }

 protected:
  explicit WspStage(const WspStageSetup& setup);

  // What the roles do differently.
  virtual void open(dist::ParamServer& server) = 0;  // bind: this stage's client, if it has one
  virtual void push(int64_t wave, const std::vector<float>& u) = 0;  // ũ_s, local layout
  virtual void request(int64_t needs) = 0;            // the end of a clock asks for c_global ≥ needs
  virtual std::optional<Pulled> take() = 0;           // a pull that has returned (never blocks)
  virtual bool follows() const { return false; }      // the follower role (its leader pulls)
  virtual Pulled wait_gated() = 0;                    // the pull the next minibatch needs (blocks)
  virtual Pulled meeting_pull() = 0;                  // every VW drained: the pull of every pushed wave
  virtual void drain_client() {}
  virtual void close() {}

  // Shared by the roles.
  bool first_stage() const { return s_.vw_comm->rank() == 0; }
  // The held tensors of a global-layout buffer, in this stage's local layout.
  std::vector<float> local_part(const std::vector<float>& global_flat) const;
  // Local flat -> packed (this stage's tensors in `which` order).
  void pack(const std::vector<float>& local, const std::vector<int>& which, std::vector<float>& out) const;
  // The first stage: `full` (global layout) = this stage's owned tensors of `mine` (local layout)
  // and every other stage's, received packed (they send theirs: bind's w0, each wave's ũ).
  void gather_owned(const std::vector<float>& mine, std::vector<float>& full);
  // A pull returned: the wait since its request (the end of the clock).
  void note_wait();
  void count_sent(int stage, size_t floats) {
    vw_sent_.resize(static_cast<size_t>(s_.vw_comm->size()), 0);
    vw_sent_[static_cast<size_t>(stage)] += floats * sizeof(float);
  }
  void span(pipeline::Activity what, double start) const;

  WspStageSetup s_;
  int first_wave_ = 0;
  SequentialModel* model_ = nullptr;
  const GlobalParams* global_ = nullptr;
  std::unique_ptr<dist::ServerClient> client_;
  // This stage's tensors: local index -> global index; the ones it pushes (owned) and holds.
  std::vector<int> global_of_;
  std::vector<int> owned_, held_;  // local indices
  // The first stage: every stage's (global index) lists in packed order, owned and held.
  std::vector<std::vector<int>> stage_owned_, stage_held_;
  std::vector<float> full_, packed_;
  int pushed_ = 0;
  std::vector<uint64_t> vw_sent_;  // bytes sent to each stage of the VW (pushes' parts, pulls' parts)
  double wait_ = 0, idle_ = 0;
  double wait_total_ = 0, idle_total_ = 0;  // the VW's first stage's (followers: as of its last pull)
  Timer requested_;  // since the outstanding pull's request (the end of a clock)

 private:
  void to_host(WeightVersions* versions, int64_t version, std::vector<float>& out);
  // The merge rule onto the stash (versions >= b, `base` as above) or, with `versions` null, onto
  // the model's parameters, which hold version `latest`.
  void merge(const Pulled& pulled, WeightVersions* versions, int64_t base, int64_t latest);
  void read_board();
  void trace(nlohmann::json event) const;

  // A pushed wave not in w_global yet: its ũ (local flat) and the updates it holds.
  struct OwnWave {
    int wave;
    std::vector<float> u;
    wsp::VersionVector tag;
  };

  wsp::WorkerClock clock_;
  std::vector<float> anchor_, host_, delta_;
  std::deque<OwnWave> own_;
  // The updates each weight version this stage still holds contains, and the anchor's (the
  // wave start's): tags that follow the tensors through every update, push and merge.
  std::map<int64_t, wsp::VersionVector> tags_;
  wsp::VersionVector anchor_tag_;
  std::unique_ptr<WspTraceFile> trace_;
  int64_t c_global_ = 0;
  int staleness_ = 0;
  std::optional<Pulled> early_;  // a pull forward_ready took: merged by the gated minibatch's before_forward
  double push_ = 0, stretched_ = 0;
  bool stop_posted_ = false;
  std::optional<int64_t> stop_at_;
};

}  // namespace baton
