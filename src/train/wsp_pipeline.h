// WSP for a virtual worker (VW) of several pipeline stages (HetPipe §4–§5; docs/hetpipe.md
// "Virtual workers of several stages"): one WspStageSync per stage rank, called by the step path
// (UpdateHooks, train/step_runner.h) before each of the rank's forwards and after each of its
// updates, while the VW runs the `hetpipe` schedule (Nm minibatches in flight, minibatch p on the
// local updates 1 … p − Nm; pipeline/schedules.cpp).
//
// By default (hetero.placement = "default") the VW's first stage is its client of the parameter
// server ("leader"); the other stages talk to it over the VW's communicator:
// - push (end of wave c, on every stage as its backward of minibatch (c+1)·Nm finishes): the stage's
//   wave update ũ_s = its latest weights − its weights at the wave's start (every update of the
//   wave, on its layers). Stages s > 0 send theirs to the leader (they finish the wave before it:
//   backwards run from the last stage to the first); the leader's own finish completes the wave
//   and it pushes the VW's whole ũ once (one push per VW and wave, as §5 says). A tied parameter
//   held by two stages (a GPT's wte) is pushed by the stage of its lowest layer only: the copies
//   receive identical updates.
// - pull (end of clock c ≥ D, gating minibatch (c+2)·Nm): the leader reads w_global as of
//   c_global = X (the whole model; as soon as the server allows, or blocking at its forward of
//   (c+2)·Nm) and sends every stage X and its layers' part; a stage merges it right before its own
//   forward of (c+2)·Nm. So every stage of a VW merges the same X: a minibatch's weights are one
//   version of the model across the pipeline.
// - merge (the rule of docs/hetpipe.md, with PMP's versions): the version minibatch (c+2)·Nm reads
//   is b = (c+1)·Nm, the end of wave c. It becomes w_global(X) + the stage's own pushed waves ≥ X
//   (the server holds them back until every VW pushed them), and every later version the stash
//   already holds (own updates of wave c+1 finished meanwhile) moves by the same Δ:
//   v ← v + (w_global(X) + own unfolded waves − version b) for every kept v ≥ b. Versions < b
//   (read by minibatches of wave c+1 that started before the pull) are untouched. Minibatch 11 of
//   the paper's D = 0, Nm = 4 example reads version 7 = global 1–4 (X = 1, merged at b = 4) plus
//   own 5–7; minibatch 12 reads version 8 = global 1–8.
// With hetero.placement = "local" (HetPipe §6's ED-local; local_placement below) every stage is a
// client of its own: it pushes its owned tensors of ũ (the server completes the VW's wave when all
// parts arrived: dist/param_server.h) and pulls its held tensors, requesting at its own clock end
// and merging before its own forward of (c+2)·Nm as above, with the X it got. The stages of a VW
// may then merge different X ≥ the clock's need (each is w_global of its tensors at some c_global
// the clock allows): every stage keeps the staleness bound, and a minibatch's weights may mix
// versions across stages, as in the paper, whose stages talk to their node's server themselves.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "dist/comm.h"
#include "dist/param_server.h"
#include "dist/server_client.h"
#include "model/sequential_model.h"
#include "core/timer.h"
#include "train/compute_stretch.h"
#include "config/virtual_workers.h"
#include "train/step_runner.h"
#include "wsp/worker_clock.h"

namespace baton {

// The parameters of the whole model in one flat layout that every rank agrees on (every layer's
// add_params in global layer order, the tied ones once): the parameter server's tensors.
struct GlobalParams {
  ParamTable table;
  std::vector<int> layer;  // per tensor: the global layer that adds it first (a tied one's lowest)
  std::vector<dist::TensorSpan> spans() const;
  size_t floats() const { return table.total(); }
};
GlobalParams global_params(const ModelBuilder& builder, const Backend& be);

// hetero.placement = "local" (HetPipe §6's ED-local): each tensor's shard is the rank of a stage
// that owns it — the stage holding its (lowest) layer — taking the VWs in turn (tensor i in VW
// i mod N), so with ED's identical VWs, whose stage s all sit on node s, every stage pushes and
// pulls its layers on its own node. `layers[v]` are VW v's stage boundaries ([first, end) per stage).
std::vector<int> local_placement(const GlobalParams& global, const std::vector<VirtualWorker>& vws,
                                 const std::vector<std::vector<std::vector<int>>>& layers);

// The version vector of w_global as of c_global plus the VW's own pushed waves beyond it (what a
// merge of a pull holds): every VW's minibatches 1 … c_global·Nm and own 1 … pushed·Nm.
wsp::VersionVector pulled_version(int num_vw, int64_t c_global, int vw, int pushed, int nm);
// How many of the newest minibatch indices 1 … p − 1 some VW's updates are missing from `w`.
int observed_staleness(const wsp::VersionVector& w, int p, int num_vw);

struct WspStageSetup {
  int vw = 0, num_vw = 1;
  wsp::WspParams params;
  int64_t minibatches = 0;          // the run's (train.steps)
  dist::Comm* vw_comm = nullptr;    // the VW's stages, rank = stage
  const ComputeStretch* stretch = nullptr;  // this rank's emulated device (null: none)
  int first_wave = 0;  // a resumed run's first wave (train/wsp_checkpoint.h): the server counts from it
  bool per_stage = false;   // hetero.placement = "local": every stage its own server client
  bool background = false;  // the clients' pushes and pulls on a thread (dist/server_client.h)
};

class WspStageSync final : public UpdateHooks {
 public:
  explicit WspStageSync(const WspStageSetup& setup);
  // Once the stage's model exists (collective over the VW): maps its tensors into the global
  // layout and opens this stage's client of `server` (the leader's, for the whole model; with
  // per_stage every stage's, for its tensors); the leader gathers w0 of the whole model into `w0`
  // (other stages: untouched). `server` must outlive this object's finish().
  void bind(SequentialModel& model, const GlobalParams& global, dist::ParamServer& server, std::vector<float>& w0);

  void before_forward(int64_t minibatch, WeightVersions& versions, int64_t base) override;
  void after_update(int64_t update, WeightVersions& versions, int64_t base) override;
  void after_compute(int64_t minibatch, WorkTime t) override;
  // A checkpoint's meeting (train/wsp_checkpoint.h), every VW drained at a wave's end: takes the
  // outstanding pull (the leader from the server, the other stages from it) and sets this stage's
  // weights — the model's parameters, from which the next segment's stash starts — to its part of
  // w_global. Returns false (and does nothing) when no pull is outstanding (the end of a clock < D).
  bool merge_at_meeting();
  // The pushes handed to this stage's client are on the server (before a checkpoint's meeting).
  void drain();
  // Completes the messages still in flight and closes the client (end of the run).
  void finish();

  // For the metrics of the minibatch that started last on this stage.
  int clock() const { return clock_.c_local(); }
  int c_global() const { return static_cast<int>(c_global_); }
  int staleness() const { return staleness_; }
  // The VW's waiting is its leader's (the other stages learn it with each pull the leader sends):
  // wait = from the end of a clock (the pull's request, at the wave's push) to the pull's return,
  // idle = the part of it the leader was blocked (the rest ran the next wave's first minibatches).
  double take_wait() { return std::exchange(wait_, 0.0); }
  double take_idle() { return std::exchange(idle_, 0.0); }
  double take_push() { return std::exchange(push_, 0.0); }
  double take_stretch() { return std::exchange(stretched_, 0.0); }
  double slowdown(int64_t minibatch) const { return s_.stretch ? s_.stretch->factor(minibatch) : 1.0; }

 private:
  bool leader() const { return s_.vw_comm->rank() == 0; }
  bool client() const { return leader() || s_.per_stage; }  // this stage talks to the server
  // The held tensors of a global-layout buffer, in this stage's local layout.
  std::vector<float> local_part(const std::vector<float>& global_flat) const;
  // A pull returned: the wait since its request (the end of the clock).
  void note_wait();
  void to_host(const WeightVersions& versions, int64_t version, std::vector<float>& out);
  // Local flat <-> packed (this stage's tensors in `ids` order) <-> global flat.
  void pack(const std::vector<float>& local, const std::vector<int>& which, std::vector<float>& out) const;
  // The merge rule onto the stash (versions >= b = the pull's clock end, `base` as above) or, with
  // `versions` null, onto the model's parameters (a drained pipeline).
  void merge(int64_t x, const std::vector<float>& global_local, WeightVersions* versions, int64_t base);
  // Leader: sends X and every other stage's part of full_ (pulled as of X); returns its own part.
  std::vector<float> leader_send_pull(int64_t x);
  // A pull of X returned into full_ on a client stage: this stage's part of it (the leader also
  // sends every other stage theirs).
  std::vector<float> take_returned_pull(int64_t x);
  // Other stages: receives the leader's X and this stage's part.
  std::vector<float> receive_pull(int64_t& x);
  // Leader: `full` (global layout) = this stage's owned tensors of `mine` (local layout) and every
  // other stage's, received packed (they send theirs: bind's w0, each wave's ũ).
  void gather_owned(const std::vector<float>& mine, std::vector<float>& full);

  WspStageSetup s_;
  SequentialModel* model_ = nullptr;
  const GlobalParams* global_ = nullptr;
  dist::ParamServer::Selection push_sel_, pull_sel_;  // per_stage: this stage's owned / held tensors
  std::unique_ptr<dist::ServerClient> client_;
  wsp::WorkerClock clock_;
  // This stage's tensors: local index -> global index; the ones it pushes (owned) and holds.
  std::vector<int> global_of_;
  std::vector<int> owned_, held_;  // local indices
  // Leader: every stage's (global index) lists in packed order, owned and held.
  std::vector<std::vector<int>> stage_owned_, stage_held_;
  std::vector<float> anchor_, host_, delta_, full_, packed_;
  std::deque<std::pair<int, std::vector<float>>> own_;  // pushed waves not in w_global yet (local flat)
  std::vector<std::vector<float>> sendbufs_;
  std::vector<dist::RequestPtr> sends_;
  std::vector<std::pair<int, int64_t>> merges_;  // (boundary version b, X), in order
  int64_t c_global_ = 0;
  int64_t pull_msg_[3] = {0, 0, 0};  // what the leader's last pull sends: X, its wait and idle totals (bits)
  int pushed_ = 0, staleness_ = 0;
  double wait_ = 0, idle_ = 0, push_ = 0, stretched_ = 0;
  double wait_total_ = 0, idle_total_ = 0;  // the leader's (as of its last pull on the other stages)
  Timer requested_;  // leader: since the outstanding pull's request
};

}  // namespace baton
