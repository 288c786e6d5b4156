// hetero.sync = "wsp" (HetPipe §4–5; train/hetero/virtual_worker_sync.h): every rank is a stage of its
// VW (train/hetero/wsp_stage.h: the one WSP worker, for one stage or several), the parameter server holds
// w_global in one layout every rank agrees on, sharded over the world (dist/param_server.h), and
// checkpoints are meetings of every VW at a wave's end (train/hetero/wsp_checkpoint.h). Stops: a stage
// asked to stop posts it on the job's StopBoard; all VWs stop at the agreed wave end and meet
// there as at a checkpoint (wsp_stage.h "Stopping"), or at the next checkpoint if it comes first.
#include <filesystem>
#include <memory>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "core/stop_signal.h"
#include "dist/param_server.h"
#include "dist/stop_board.h"
#include "train/hetero/virtual_worker_sync.h"
#include "train/hetero/wsp_stage.h"
#include "train/hetero/wsp_turns.h"

namespace baton {
namespace {

// Whether this run's server clients push and pull on a thread of their own (hetero.overlap;
// dist/server_client.h): not in deterministic mode (its fixed order of server accesses), and only
// where MPI provides MPI_THREAD_MULTIPLE (`baton train` asks for it; rank 0 says when it did not).
bool server_thread(const Config& cfg, const dist::Comm& world) {
  if (!cfg.hetero.overlap || cfg.hetero.deterministic) return false;
  if (dist::MpiRuntime::thread_multiple()) {
    if (world.rank() == 0)
      log::info("parameter server clients push and pull on a thread of their own, beside the compute "
                "(hetero.overlap)");
    return true;
  }
  if (world.rank() == 0)
    log::warn("hetero.overlap: this MPI does not provide MPI_THREAD_MULTIPLE, so pushes and pulls run on the "
              "training thread between minibatches (set hetero.overlap = false to say so)");
  return false;
}

class WspSync final : public VirtualWorkerSync {
 public:
  WspSync(const Config& cfg, dist::Comm& world, const dist::Layout& layout)
      : VirtualWorkerSync(cfg, world, layout),
        params_{.num_vw = num_vw_, .nm = cfg.hetero.nm, .staleness = cfg.hetero.staleness},
        // The VW's own communicator (rank = stage) for its stages' WSP messages: apart from the
        // pipeline's, whose tags could match them.
        vw_comm_(world.split(vw_, stage_)),
        turns_(cfg, world, layout, vw_) {
    BATON_REQUIRE(world.mpi_handle() != MPI_COMM_NULL,
                  "hetero.sync = \"wsp\" needs the MPI runtime (the parameter server is one-sided MPI)",
                  "run `baton train` (under mpirun for several virtual workers)");
    // The deterministic mode stops only at checkpoints (its order of turns is cut there).
    if (!cfg.hetero.deterministic) board_ = std::make_unique<dist::StopBoard>(world.mpi_handle());
    stage_sync_ = WspStage::make({.vw = vw_, .num_vw = num_vw_, .params = params_, .minibatches = cfg.train.steps,
                                  .vw_comm = vw_comm_.get(), .stretch = &stretch_,
                                  .local_client = cfg.hetero.placement == Placement::LOCAL,
                                  .background = server_thread(cfg, world),
                                  .turns = turns_.on() && stage_ == 0 ? &turns_ : nullptr,
                                  .reorder = !cfg.hetero.deterministic,
                                  .board = board_.get()});
  }

  UpdateHooks* hooks() override { return stage_sync_.get(); }

  void header(TrainSession& session) override {
    stage_sync_->set_timeline(session.timeline());
    if (world_.rank() != 0) return;
    const bool pipelined = layout_.world() > num_vw_;
    log::info("WSP (HetPipe {}): {} virtual workers ({}) | Nm = {} minibatches {}per wave | D = {} | s_global = {} | "
              "minibatch = {} rows of each global batch of {} | parameter server: {} shards, {} | checkpoints at "
              "wave ends (train/hetero/wsp_checkpoint.h)",
              pipelined ? "§4-5" : "§5", num_vw_,
              cfg_.hetero.virtual_workers.empty() ? std::string("one rank each")
                                                  : fmt::format("{}", fmt::join(cfg_.hetero.virtual_workers, " | ")),
              params_.nm, pipelined ? "in flight and " : "", params_.staleness,
              wsp::s_global(params_.staleness, params_.nm), cfg_.train.global_batch / num_vw_,
              cfg_.train.global_batch, world_.size(),
              cfg_.hetero.placement == Placement::LOCAL
                  ? "placement local (each tensor on a rank of a stage that owns it; every stage its own client)"
                  : "tensors round robin, each VW's first stage its client, one-sided MPI");
  }

  // The server starts from the weights every VW holds now (one seed, or the checkpoint's w_global):
  // the VWs' first stages gather w0 and VW 0's hands it to every shard.
  void start_sync(TrainSession& session, int64_t first_step) override {
    turns_.start_at(first_step);
    stage_sync_->start_at(static_cast<int>(first_step / params_.nm));
    if (cfg_.run.trace) {
      std::filesystem::create_directories(cfg_.run.dir);
      stage_sync_->set_trace(std::make_unique<WspTraceFile>(
          fmt::format("{}/wsp-trace-vw{}-stage{}.jsonl", cfg_.run.dir, vw_, stage_), first_step > 0),
                              cfg_.hetero.deterministic);
    }
    global_ = global_params(session.builder(), session.backend());
    std::vector<int> placement;  // empty: round robin
    if (cfg_.hetero.placement == Placement::LOCAL) placement = local_placement(global_, layout_);
    server_ = std::make_unique<dist::ParamServer>(world_.mpi_handle(), global_.spans(), num_vw_, params_.staleness,
                                                  placement);
    std::vector<float> w0(global_.floats(), 0.0f);
    stage_sync_->bind(session.model(), global_, *server_, w0);
    world_.broadcast(w0.data(), w0.size(), DType::F32, layout_.rank_of(0, 0, 0));
    server_->init(w0.data());
  }

  VwMetrics sync_step(TrainSession&, int64_t step) override {
    if (stop_requested()) stage_sync_->post_stop();
    WspStage& s = *stage_sync_;
    return VwMetrics{.clock = s.clock(), .c_global = s.c_global(), .staleness = s.staleness(), .wait_s = s.take_wait(),
                     .push_s = s.take_push(), .idle_s = s.take_idle(), .slowdown = s.slowdown(step + 1),
                     .stretch_s = s.take_stretch()};
  }
  std::string describe(const VwMetrics& vm) const override {
    return fmt::format("clock {} (global {}) | staleness {}", vm.clock, vm.c_global, vm.staleness);
  }
  const char* waiting_for() const override { return "waiting for the parameter server"; }
  std::optional<int64_t> stop_at() const override { return stage_sync_->stop_at(); }

  // A checkpoint (train/hetero/wsp_checkpoint.h): the VWs' pipelines drained at this wave's end (the step
  // runner's segments end at checkpoint.every, or at the agreed stop), everyone meets, merges
  // w_global and saves. The run's end is one too, unless its clock does not pull (a run shorter
  // than D + 1 waves). Then all agree whether to stop here.
  std::string save(TrainSession& session, int64_t step, double lr) override {
    const bool last = step + 1 == cfg_.train.steps;
    stage_sync_->drain();  // every VW's waves up to here are on the server once all meet
    world_.barrier();
    const bool merged = stage_sync_->merge_at_meeting();
    BATON_ASSERT(merged || last, "WSP checkpoint at step {} of a clock that does not pull", step + 1);
    const std::string path = save_and_publish(session, step, lr, merged);
    if (!last && agree_stop(stop_requested() || stage_sync_->stop_posted())) stop_agreed_at_ = step;
    return path;
  }
  bool stop_after(TrainSession&, int64_t step) override { return stop_agreed_at_ == step; }

  // Every VW has pushed all its waves before anyone frees the windows.
  void close() override {
    stage_sync_->finish();
    stage_sync_->trace_traffic(*server_);
    world_.barrier();
    server_.reset();
    board_.reset();
  }

 private:
  wsp::WspParams params_;
  std::unique_ptr<dist::Comm> vw_comm_;
  WspTurns turns_;  // hetero.deterministic: the leaders' hooks in a seeded global order
  std::unique_ptr<dist::StopBoard> board_;
  std::unique_ptr<WspStage> stage_sync_;
  GlobalParams global_;
  std::unique_ptr<dist::ParamServer> server_;  // outlives the stage's client thread (closed first)
};

}  // namespace

std::unique_ptr<CrossGroupSync> make_wsp_sync(const Config& cfg, dist::Comm& world, const dist::Layout& layout) {
  return std::make_unique<WspSync>(cfg, world, layout);
}

}  // namespace baton
