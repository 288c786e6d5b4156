// One rank = one virtual worker of one stage under WSP or the allreduce baseline (see wsp_trainer.h
// for the rules).
#include "train/wsp_trainer.h"

#include <algorithm>
#include <array>
#include <deque>
#include <string_view>
#include <memory>
#include <utility>
#include <vector>

#include "config/device_emulation.h"
#include "config/virtual_workers.h"
#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "dist/mpi_comm.h"
#include "dist/param_server.h"
#include "dist/server_client.h"
#include "dist/self_comm.h"
#include "optim/lr_schedule.h"
#include "core/bytes.h"
#include "train/compute_stretch.h"
#include "train/loss_spike.h"
#include "train/metrics.h"
#include "train/session.h"
#include "train/vw_rows.h"
#include "dist/node_local.h"
#include "train/wsp_checkpoint.h"
#include "train/wsp_pipeline.h"
#include "train/wsp_turns.h"
#include "wsp/worker_clock.h"

namespace baton {
namespace {

// The VW's model and its rows of the job's data: the source is built for the job's global batch B
// (an image loader numbers row r of step s as sample s·B + r; token windows do not depend on B), and
// VwRows hands this VW rows [vw·rows, (vw + 1)·rows) of it. `local` is the VW's own config.
ModelAndData vw_model_and_data(const Config& local, const Config& cfg, int vw, int rows) {
  Config whole = local;
  whole.train.global_batch = cfg.train.global_batch;
  ModelAndData md = model_and_data(whole);
  md.data = std::make_unique<VwRows>(std::move(md.data), vw * rows, rows);
  return md;
}

// A VW's own loss spike ends the job (train/loss_spike.h): one message naming the VW.
void check_spike(LossSpikeGuard& spikes, int vw, int64_t step, double loss) {
  if (const std::optional<std::string> spike = spikes.check(step + 1, loss))
    throw Error(fmt::format("virtual worker {}: {}", vw, *spike),
                "lower optim.lr or raise optim.warmup_steps, or raise train.spike_factor (0 turns the check off)");
}

// Rank 0 logs what every rank emulates (config/device_emulation.h: a pure function of the config).
void log_emulation(const std::vector<RankEmulation>& emu, const std::vector<std::vector<int>>& vws, double jitter) {
  for (size_t r = 0; r < emu.size(); ++r) {
    const RankEmulation& e = emu[r];
    if (!e.emulated() && e.device.empty() && jitter == 0) continue;
    log::info("rank {} (vw {}){}: compute x{:.3g}{}{} | memory limit {}", r, virtual_worker_of(vws, static_cast<int>(r)),
              e.device.empty() ? std::string() : fmt::format(" emulates {}", e.device), e.slowdown,
              e.slowdown_from.empty() ? std::string() : fmt::format(" ({})", e.slowdown_from),
              jitter == 0 ? std::string() : fmt::format(" x a seeded factor in [1, {:.3g}] per minibatch", 1 + jitter),
              e.memory_limit == 0 ? std::string("none") : format_bytes(static_cast<double>(e.memory_limit)));
  }
}

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

// The VW's own session (the whole model on this rank, its minibatch = its rows of each global
// batch; its backend limited to the emulated device's memory) and the stretch of its compute.
struct VwSetup {
  std::unique_ptr<TrainSession> session;
  ComputeStretch stretch;
};

VwSetup vw_setup(const Config& cfg, const std::vector<std::vector<int>>& vws, int vw, int rank, int world_size,
                 dist::SelfComm& alone) {
  const int N = static_cast<int>(vws.size());
  const std::vector<RankEmulation> emu = rank_emulation(cfg, world_size);
  log_emulation(emu, vws, cfg.hetero.jitter);
  const RankEmulation& mine = emu[static_cast<size_t>(rank)];
  const int rows = cfg.train.global_batch / N;  // validate(): a multiple of micro_batch × N
  Config local = cfg;
  local.hetero = HeteroConfig{};
  local.train.global_batch = rows;
  local.dp = 1;
  local.checkpoint.dir = vw_checkpoint_dir(cfg, vw);  // its own files (train/wsp_checkpoint.h)
  ModelAndData md = vw_model_and_data(local, cfg, vw, rows);
  if (!cfg.hetero.virtual_workers.empty())  // a one-stage VW's explicit layers must be the whole model
    virtual_workers(cfg.hetero, 0)[static_cast<size_t>(vw)].layer_ranges(md.builder->num_layers(), vw);
  auto session = std::make_unique<TrainSession>(
      local, alone, std::move(md.builder), std::move(md.data),
      SessionOptions{.memory_limit = {.bytes = mine.memory_limit, .rank = rank, .device = mine.device}});
  session->log_header();
  return {std::move(session), ComputeStretch(mine.slowdown, cfg.hetero.jitter, cfg.train.seed, rank)};
}

// The session's step with its compute stretched as on the emulated device (compute_stretch.h): the
// step's time includes the sleep; `vm` gets the factor and the seconds slept.
TimedStep emulated_step(TrainSession& session, const ComputeStretch& stretch, int64_t step, double lr,
                        VwMetrics& vm) {
  const WorkTimer work;
  TimedStep t = session.step(step, lr);
  const WorkTime w = work.elapsed();
  vm.slowdown = stretch.factor(step + 1);
  vm.stretch_s = stretch.stretch(w, step + 1);
  t.seconds += vm.stretch_s;
  return t;
}

// A VW's outputs: the resolved config (rank 0), its metrics file (metrics.jsonl for VW 0,
// metrics-vw<k>.jsonl for the others), and after each step the summary, evaluation at
// train.eval_every (and at the end), its metrics record and log line; `sync` is the sync mode's
// part of the line. It keeps the run's totals (waiting, idle, minibatches/s: the loop gives each
// minibatch's own) and, at the end, rank 0 logs every VW's.
class VwLog {
 public:
  // `reports`: this rank writes the VW's metrics and log lines (its last stage, which has the
  // loss); every rank of the VW calls step() (evaluation is collective over the VW).
  // `resumed_at` >= 0: a resumed run appends after the records up to that step.
  VwLog(const Config& cfg, TrainSession& session, int rank, int vw, bool reports = true, int64_t resumed_at = -1)
      : cfg_(cfg), session_(session),
        metrics_((rank == 0 ? write_resolved_config(cfg, cfg.run.dir) : std::string(),
                  reports && resumed_at >= 0 ? truncate_metrics_after(cfg.run.dir + "/" + file_name(vw), resumed_at)
                                             : void(),
                  reports ? cfg.run.dir : ""),
                 resumed_at >= 0, file_name(vw)),
        vw_(vw), reports_(reports) {}
  static std::string file_name(int vw) { return vw == 0 ? "metrics.jsonl" : fmt::format("metrics-vw{}.jsonl", vw); }
  const TrainSummary& summary() const { return summary_; }
  void step(int64_t step, double lr, const TimedStep& t, VwMetrics vm, const std::string& sync) {
    totals_[kWait] += vm.wait_s;
    totals_[kIdle] += vm.idle_s;
    totals_[kStretch] += vm.stretch_s;
    totals_[kFactors] += vm.slowdown;
    totals_[kMinibatches] += 1;
    vm.wait_total_s = totals_[kWait];
    vm.idle_total_s = totals_[kIdle];
    vm.minibatches_per_s = totals_[kMinibatches] / std::max(1e-9, run_timer_.seconds());
    summary_.steps_done++;
    summary_.last_step = step + 1;
    summary_.last_loss = t.result.loss;
    loss_window_ += t.result.loss;
    window_++;
    StepMetrics m = session_.metrics(step, lr, t);
    m.vw = vm;
    const bool last = step + 1 == cfg_.train.steps;
    if ((cfg_.train.eval_every > 0 && (step + 1) % cfg_.train.eval_every == 0) || last)
      if (const std::optional<EvalResult> r = session_.evaluate()) {
        m.val_loss = r->loss;
        summary_.last_val_loss = r->loss;
      }
    if (!reports_ || ((step + 1) % cfg_.train.log_every != 0 && !last && step != 0 && !m.val_loss)) return;
    metrics_.write(m);
    log::info("vw {} step {:>6}/{} | loss {:.4f}{} | lr {:.2e} | {} | waited {:.1f} ms, idle {:.1f} ms ({:.2f} s, "
              "{:.2f} s in all) | {:.0f} ms{} | {:.3g} minibatches/s",
              vw_, step + 1, cfg_.train.steps, loss_window_ / window_,
              m.val_loss ? fmt::format(" | val {:.4f}", *m.val_loss) : std::string(), lr, sync, 1e3 * vm.wait_s,
              1e3 * vm.idle_s, vm.wait_total_s, vm.idle_total_s, 1e3 * t.seconds,
              vm.slowdown != 1 ? fmt::format(" (compute x{:.3g})", vm.slowdown) : std::string(), vm.minibatches_per_s);
    loss_window_ = 0;
    window_ = 0;
  }

  // Collective over `world` (one rank per VW): rank 0 logs each VW's minibatches/s, the slowdown it
  // ran at, its waiting (`waiting` names what for) and the idle part of it.
  void finish(dist::Comm& world, const std::vector<std::vector<int>>& vws, std::string_view waiting) {
    totals_[kSeconds] = run_timer_.seconds();
    totals_[kReports] = reports_ ? 1 : 0;
    std::vector<double> all(totals_.size() * static_cast<size_t>(world.size()));
    world.all_gather(totals_.data(), all.data(), totals_.size(), DType::F64);
    for (int r = 0; r < world.size(); ++r) {
      const double* x = all.data() + totals_.size() * static_cast<size_t>(r);
      if (x[kReports] == 0) continue;  // one line per VW: its reporting (last) stage's
      const double n = std::max(1.0, x[kMinibatches]);
      log::info("vw {}: {:.0f} minibatches in {:.2f} s = {:.3g} minibatches/s (compute x{:.3g}{}) | {:.2f} s ({:.0f}%) "
                "{}, {:.2f} s idle ({:.0f}% of the waiting)",
                virtual_worker_of(vws, r), x[kMinibatches], x[kSeconds], x[kMinibatches] / std::max(1e-9, x[kSeconds]),
                x[kFactors] / n, x[kStretch] > 0 ? fmt::format(", {:.2f} s slept", x[kStretch]) : std::string(),
                x[kWait], 100 * x[kWait] / std::max(1e-9, x[kSeconds]), waiting, x[kIdle],
                100 * x[kIdle] / std::max(1e-9, x[kWait]));
    }
  }

 private:
  enum Total { kMinibatches, kSeconds, kWait, kIdle, kStretch, kFactors, kReports, kTotals };
  const Config& cfg_;
  TrainSession& session_;
  MetricsWriter metrics_;
  TrainSummary summary_;
  int vw_;
  bool reports_;
  double loss_window_ = 0;
  int window_ = 0;
  Timer run_timer_;
  std::array<double, kTotals> totals_{};
};

// hetero.sync = "allreduce" (the synchronous baseline, wsp_trainer.h): every VW trains its waves of
// Nm minibatches locally; at the end of wave c every VW's weights become
// w_start(c) + (Σ_k ũ_k) / N with ũ_k = w_end_k − w_start(c), the VW's own wave update.
TrainSummary train_allreduce(const Config& cfg, dist::Comm& world, const std::vector<std::vector<int>>& vws, int vw) {
  const int N = static_cast<int>(vws.size());
  dist::SelfComm alone;
  const VwSetup setup = vw_setup(cfg, vws, vw, world.rank(), world.size(), alone);
  TrainSession& session = *setup.session;
  const int nm = cfg.hetero.nm;
  log::info("allreduce between virtual workers (HetPipe's synchronous baseline): {} virtual workers of one "
            "rank each | Nm = {} minibatches per wave | at each wave's end every VW's weights become the wave's "
            "start + the mean of the VWs' wave updates | minibatch = {} rows of each global batch of {} | "
            "checkpoints at wave ends (train/wsp_checkpoint.h)",
            N, nm, cfg.train.global_batch / N, cfg.train.global_batch);
  // Resume (train/wsp_checkpoint.h): every VW's file holds the common weights of a wave's end; each
  // VW loads its own (optimizer state included), or VW 0's when the VWs changed.
  const std::optional<WspResume> resume = find_wsp_resume(cfg, world, vw);
  if (resume) {
    session.load(resume->path);
    log_wsp_resume(*resume, N, "allreduce");
  }
  const int64_t first = resume ? resume->step : 0;
  SequentialModel& model = session.model();
  Backend& be = session.backend();
  const size_t F = model.flat_size();
  // start = w at the start of the wave (the same on every VW), u = the wave update, then the sum.
  std::vector<float> start(F), u(F);
  be.to_host(start.data(), model.params(), F * sizeof(float));  // w0 (one seed) or the checkpoint's: the same everywhere
  // The parameters' positions in the flat buffer (the gaps between tensors stay as they are).
  std::vector<char> in_tensor(F, 0);
  for (int i = 0; i < model.table().size(); ++i)
    std::fill_n(in_tensor.begin() + static_cast<std::ptrdiff_t>(model.table().offset(i)), model.table().numel(i), 1);

  const LrSchedule sched = lr_schedule(cfg.optim, cfg.train.steps);
  VwLog vwlog(cfg, session, world.rank(), vw, true, resume ? first : -1);
  int waves = static_cast<int>(first / nm);
  LossSpikeGuard spikes(cfg.train.spike_factor, cfg.train.spike_window);  // each VW's own losses
  for (int64_t step = first; step < cfg.train.steps; ++step) {
    // Minibatch p = step + 1 runs on every VW's waves before its own wave plus its own minibatches
    // of this wave: it misses the other VWs' (p − 1) mod Nm newest minibatches.
    const int staleness = N > 1 ? static_cast<int>(step % nm) : 0;
    const double lr = sched.at(step);
    VwMetrics vm{.vw = vw, .clock = static_cast<int>(step / nm), .staleness = staleness};
    const TimedStep t = emulated_step(session, setup.stretch, step, lr, vm);
    check_spike(spikes, vw, step, t.result.loss);
    double wait = 0, sync_s = 0;
    if ((step + 1) % nm == 0) {  // the wave's end: average the VWs' wave updates
      Timer sync_timer;
      be.to_host(u.data(), model.params(), F * sizeof(float));
      for (size_t j = 0; j < F; ++j) u[j] = in_tensor[j] ? u[j] - start[j] : 0.0f;
      Timer wait_timer;
      world.all_reduce(u.data(), F, DType::F32, dist::ReduceOp::SUM);  // waits for the slowest VW
      wait = wait_timer.seconds();
      const float inv_n = 1.0f / static_cast<float>(N);
      for (size_t j = 0; j < F; ++j) start[j] += u[j] * inv_n;
      be.to_device(model.params(), start.data(), F * sizeof(float));
      model.refresh_compute_params();
      ++waves;
      sync_s = sync_timer.seconds() - wait;
    }

    // clock = the wave this minibatch belongs to, c_global = waves averaged after it, wait_s = the
    // all-reduce at its end (waiting for the slowest VW included; blocking, so idle_s is the same),
    // push_s = the rest of that sync.
    vm.c_global = waves;
    vm.wait_s = vm.idle_s = wait;
    vm.push_s = sync_s;
    vwlog.step(step, lr, t, vm, fmt::format("wave {} ({} averaged)", step / nm, waves));
    // A checkpoint at a wave's end (checkpoint.every is a multiple of Nm; the run's end is one):
    // every VW's weights are the same, each saves its own file, rank 0 the marker once all did.
    if (vw_checkpoint_after(cfg, step)) {
      session.save(step + 1, lr);
      world.barrier();
      if (world.rank() == 0) publish_wsp_checkpoint(cfg, world.size(), step + 1);
    }
  }
  vwlog.finish(world, vws, "in the all-reduce (waiting for the other virtual workers included)");
  return vwlog.summary();
}

// hetero.sync = "wsp" with virtual workers of several stages (wsp_pipeline.h): each VW is a
// pipeline over its ranks (its own stage count and layer boundaries) running the hetpipe schedule
// with Nm minibatches in flight; its stages exchange ũ and pulled weights with the VW's first
// stage, which talks to the parameter server. A VW's minibatch is one micro-batch of
// train.global_batch / N rows, one update per stage.
TrainSummary train_wsp_pipelined(const Config& cfg, dist::MpiComm& world, const std::vector<VirtualWorker>& vws,
                                 int vw) {
  const int N = static_cast<int>(vws.size());
  const VirtualWorker& me = vws[vw];
  const std::vector<int> ranks = me.ranks();
  const int k = static_cast<int>(ranks.size());
  const int stage = static_cast<int>(std::find(ranks.begin(), ranks.end(), world.rank()) - ranks.begin());
  std::unique_ptr<dist::Comm> vw_comm = world.split(vw, stage);
  dist::node_local();  // a world collective, once: the VWs' sessions (over their own ranks) reuse it
  const int rows = cfg.train.global_batch / N;  // validate(): a multiple of micro_batch × N
  const wsp::WspParams params{.num_vw = N, .nm = cfg.hetero.nm, .staleness = cfg.hetero.staleness};

  // The VW's own run: a pipeline of its stages, one minibatch (one micro-batch) per step.
  Config local = cfg;
  local.hetero = HeteroConfig{};
  local.train.global_batch = local.train.micro_batch = rows;
  local.dp = 1;
  local.parallel.pp = k;
  local.parallel.schedule = "hetpipe";
  local.checkpoint.dir = vw_checkpoint_dir(cfg, vw);  // the VW's own file (train/wsp_checkpoint.h)
  ModelAndData md = vw_model_and_data(local, cfg, vw, rows);
  local.parallel.stages = me.layer_ranges(md.builder->num_layers(), vw);
  const std::vector<RankEmulation> emu = rank_emulation(cfg, world.size());
  std::vector<std::vector<int>> vw_ranks;
  for (const VirtualWorker& v : vws) vw_ranks.push_back(v.ranks());
  log_emulation(emu, vw_ranks, cfg.hetero.jitter);
  const RankEmulation& mine = emu[static_cast<size_t>(world.rank())];
  const ComputeStretch stretch(mine.slowdown, cfg.hetero.jitter, cfg.train.seed, world.rank());
  const std::optional<WspResume> resume = find_wsp_resume(cfg, world, vw);
  const int64_t start = resume ? resume->step : 0;
  std::unique_ptr<dist::ParamServer> server;  // outlives `sync`, whose client thread uses it
  const bool local_placement_on = cfg.hetero.placement == "local";
  WspStageSync sync({.vw = vw, .num_vw = N, .params = params, .minibatches = cfg.train.steps,
                     .vw_comm = vw_comm.get(), .stretch = &stretch,
                     .first_wave = static_cast<int>(start / params.nm), .per_stage = local_placement_on,
                     .background = server_thread(cfg, world)});
  TrainSession session(local, *vw_comm, md.builder, std::move(md.data),
                       {.hetpipe_nm = params.nm, .hooks = &sync,
                        .memory_limit = {.bytes = mine.memory_limit, .rank = world.rank(), .device = mine.device}});
  session.log_header();
  if (resume) {
    session.load(resume->path);  // the VW's stages read their layers of it
    log_wsp_resume(*resume, N);
  }
  // The parameter server holds the whole model in one layout every rank agrees on; the VWs'
  // leaders gather w0 (the same in every VW: one seed, or the checkpoint's w_global) and VW 0's
  // hands it to every shard.
  const GlobalParams global = global_params(*md.builder, session.backend());
  std::vector<int> placement;  // empty: round robin
  if (local_placement_on) {
    std::vector<std::vector<std::vector<int>>> layers;
    for (size_t v = 0; v < vws.size(); ++v) {
      layers.push_back(vws[v].layer_ranges(md.builder->num_layers(), static_cast<int>(v)));
      if (layers.back().empty())  // the model's even split
        for (const LayerRange& r : md.builder->default_stages(static_cast<int>(vws[v].stages.size())))
          layers.back().push_back({r.begin, r.end});
    }
    placement = local_placement(global, vws, layers);
  }
  server = std::make_unique<dist::ParamServer>(world.handle(), global.spans(), N, params.staleness, placement);
  std::vector<float> w0(global.floats(), 0.0f);
  sync.bind(session.model(), global, *server, w0);
  world.broadcast(w0.data(), w0.size(), DType::F32, vws[0].stages[0].rank);
  server->init(w0.data());
  const bool reports = stage == k - 1;  // the last stage has the loss
  if (world.rank() == 0)
    log::info("WSP (HetPipe §4-5): {} virtual workers ({}) | Nm = {} minibatches in flight and per wave | D = {} | "
              "s_global = {} | minibatch = {} rows of each global batch of {} | parameter server: {} shards, {} | "
              "checkpoints at wave ends (train/wsp_checkpoint.h)",
              N, fmt::join(cfg.hetero.virtual_workers.empty() ? std::vector<std::string>{"one rank each"}
                                                               : cfg.hetero.virtual_workers, " | "),
              params.nm, params.staleness, wsp::s_global(params.staleness, params.nm), rows, cfg.train.global_batch,
              world.size(),
              local_placement_on ? "placement local (each tensor on a rank of a stage that owns it; every stage its "
                                   "own client)"
                                 : "tensors round robin, each VW's first stage its client");

  const LrSchedule sched = lr_schedule(cfg.optim, cfg.train.steps);
  VwLog vwlog(cfg, session, world.rank(), vw, reports, resume ? start : -1);
  LossSpikeGuard spikes(cfg.train.spike_factor, cfg.train.spike_window);
  for (int64_t step = start; step < cfg.train.steps; ++step) {
    const double lr = sched.at(step);
    const TimedStep t = session.step(step, lr);
    if (reports)
      check_spike(spikes, vw, step, t.result.loss);
    vwlog.step(step, lr, t,
               VwMetrics{.vw = vw, .clock = sync.clock(), .c_global = sync.c_global(), .staleness = sync.staleness(),
                         .wait_s = sync.take_wait(), .push_s = sync.take_push(), .idle_s = sync.take_idle(),
                         .slowdown = sync.slowdown(step + 1), .stretch_s = sync.take_stretch()},
               fmt::format("clock {} (global {}) | staleness {}", sync.clock(), sync.c_global(), sync.staleness()));
    // A checkpoint (wsp_checkpoint.h): the VWs' pipelines drained at this wave's end (the step
    // runner's segments end at checkpoint.every), everyone meets, merges w_global and saves.
    // The run's end is one too, unless its clock does not pull (a run shorter than D + 1 waves).
    const bool last = step + 1 == cfg.train.steps;
    if (vw_checkpoint_after(cfg, step)) {
      sync.drain();  // every VW's waves up to here are on the server once all meet
      world.barrier();
      const bool merged = sync.merge_at_meeting();
      BATON_ASSERT(merged || last, "WSP checkpoint at step {} of a clock that does not pull", step + 1);
      if (merged) session.save(step + 1, lr);  // collective over the VW's stages: one file per VW
      world.barrier();
      if (world.rank() == 0 && merged) publish_wsp_checkpoint(cfg, world.size(), step + 1);
    }
  }
  sync.finish();
  vwlog.finish(world, vw_ranks, "waiting for the parameter server");
  world.barrier();  // every VW has pushed all its waves before anyone frees the windows
  return vwlog.summary();
}

}  // namespace

TrainSummary train_wsp(const Config& cfg, dist::Comm& world) {
  auto* mpi = dynamic_cast<dist::MpiComm*>(&world);
  BATON_REQUIRE(mpi != nullptr,
                fmt::format("hetero.sync = \"{}\" with virtual workers needs the MPI runtime (the parameter server "
                            "is one-sided MPI; allreduce averages host copies of the weights)", cfg.hetero.sync),
                "run `baton train` (under mpirun for several virtual workers)");
  const std::vector<std::vector<int>> vws = virtual_worker_ranks(cfg.hetero, world.size());
  const int N = static_cast<int>(vws.size());
  const int vw = virtual_worker_of(vws, world.rank());
  if (cfg.hetero.sync == "allreduce") return train_allreduce(cfg, world, vws, vw);
  // Pipelines inside the VWs (HetPipe §4): every VW runs the pipelined path, also one of one stage
  // (minibatch p then reads its updates 1 … p − Nm, like every VW of the run).
  if (std::any_of(vws.begin(), vws.end(), [](const std::vector<int>& r) { return r.size() > 1; }))
    return train_wsp_pipelined(cfg, *mpi, virtual_workers(cfg.hetero, world.size()), vw);
  const int rows = cfg.train.global_batch / N;

  dist::SelfComm alone;
  const VwSetup setup = vw_setup(cfg, vws, vw, world.rank(), world.size(), alone);
  TrainSession& session = *setup.session;
  const wsp::WspParams params{.num_vw = N, .nm = cfg.hetero.nm, .staleness = cfg.hetero.staleness};
  log::info("WSP (HetPipe §5): {} virtual workers of one rank each | Nm = {} minibatches per wave | D = {} | "
            "s_global = {} | minibatch = {} rows of each global batch of {} | parameter server: {} shards "
            "(tensors round robin), one-sided MPI | checkpoints at wave ends (train/wsp_checkpoint.h)",
            N, params.nm, params.staleness, wsp::s_global(params.staleness, params.nm), rows,
            cfg.train.global_batch, world.size());

  SequentialModel& model = session.model();
  Backend& be = session.backend();
  std::vector<dist::TensorSpan> spans;
  for (int i = 0; i < model.table().size(); ++i) spans.push_back({model.table().offset(i), model.table().numel(i)});
  dist::ParamServer server(mpi->handle(), std::move(spans), N, params.staleness);
  const size_t F = model.flat_size();
  dist::ServerClient client(server, server.all(), server.all(), vw, F, server_thread(cfg, world));
  // Host mirrors: w = w_local (the device's params), partial = ũ_partial (own finished updates of
  // the wave not pushed yet), global = the last pulled w_global (gaps between tensors as in w),
  // own = the VW's pushed waves not yet in w_global (at most D + 1 of them).
  std::vector<float> w(F), after(F), partial(F, 0.0f), global(F);
  std::deque<std::pair<int, std::vector<float>>> own;
  // Resume (train/wsp_checkpoint.h): every VW's weights are w_global of the checkpoint's wave end;
  // the server starts there, its waves counted from `wave0` on.
  const std::optional<WspResume> resume = find_wsp_resume(cfg, world, vw);
  int64_t start = 0;
  if (resume) {
    session.load(resume->path);
    start = resume->step;
    log_wsp_resume(*resume, N);
  }
  const int wave0 = static_cast<int>(start / params.nm);
  be.to_host(w.data(), model.params(), F * sizeof(float));
  server.init(w.data());  // every VW starts from the same weights (w0: the same seed; or the checkpoint's)
  global = w;

  wsp::WorkerClock clock(vw, params, static_cast<int>(cfg.train.steps), nullptr, wave0);
  WspTurns turns(cfg, world, vws, vw, start);  // hetero.deterministic: minibatches in a seeded global order
  int c_global = wave0, pushed = wave0;
  // Merge rule (wsp/worker_clock.h, docs/hetpipe.md rule 6): w_local = w_global + the VW's own
  // finished updates not in it — its pushed waves the server has not folded in yet, and ũ_partial.
  const auto merge_pull = [&](int64_t pulled_c_global) {
    c_global = static_cast<int>(pulled_c_global);
    while (!own.empty() && own.front().first < c_global) own.pop_front();
    clock.complete_pull(pulled_version(N, c_global, vw, pushed, params.nm));
    for (size_t j = 0; j < F; ++j) w[j] = global[j];
    for (const auto& [wave, u] : own)
      for (size_t j = 0; j < F; ++j) w[j] += u[j];
    for (size_t j = 0; j < F; ++j) w[j] += partial[j];
    be.to_device(model.params(), w.data(), F * sizeof(float));
    model.refresh_compute_params();
  };

  const LrSchedule sched = lr_schedule(cfg.optim, cfg.train.steps);
  VwLog vwlog(cfg, session, world.rank(), vw, true, resume ? start : -1);
  // Since the pending pull was requested: at the push that ends its clock (waiting_for() set).
  Timer pull_requested;
  const auto request_pull = [&] {
    if (const std::optional<int> needs = clock.waiting_for(); needs && !client.pull_requested()) {
      client.request_pull(*needs - wave0);
      pull_requested.reset();
    }
  };
  LossSpikeGuard spikes(cfg.train.spike_factor, cfg.train.spike_window);  // each VW's own losses
  for (int64_t step = start; step < cfg.train.steps; ++step) {
    // A pull that has returned (the client tries it beside the compute) is merged now (fresher
    // weights); one that gates this minibatch is waited for, sleeping (dist/server_client.h).
    // wait = request to return (the VW may have run up to s_local minibatches meanwhile), idle =
    // the time blocked waiting for it.
    VwMetrics vm{.vw = vw};
    turns.begin();
    if (clock.waiting_for()) {
      request_pull();
      std::optional<int64_t> c;
      if (clock.startable()) {
        c = client.take_pull(global);
      } else {
        Timer blocked;
        c = turns.gated_pull(client, global);
        vm.idle_s = blocked.seconds();
      }
      if (c) {
        vm.wait_s = pull_requested.seconds();
        merge_pull(*c + wave0);
      }
    }
    const int p = clock.start();
    const int staleness = observed_staleness(clock.weights_of(p), p, N);
    BATON_ASSERT(staleness <= wsp::s_global(params.staleness, params.nm), "VW {}: minibatch {} staleness {} > s_global",
                 vw, p, staleness);
    const double lr = sched.at(step);
    const TimedStep t = emulated_step(session, setup.stretch, step, lr, vm);
    check_spike(spikes, vw, step, t.result.loss);
    // u_p = the optimizer's effect on the weights; w_local already holds it (§4: applied at once).
    be.to_host(after.data(), model.params(), F * sizeof(float));
    for (size_t j = 0; j < F; ++j) partial[j] += after[j] - w[j];
    std::swap(w, after);
    Timer push_timer;
    if (const std::optional<wsp::WorkerClock::Push> push = clock.finish()) {
      own.emplace_back(push->wave, partial);
      client.push(push->wave - wave0, std::move(partial));  // w_global += ũ once every VW pushed the wave
      ++pushed;
      partial.assign(F, 0.0f);
    }
    request_pull();  // the end of clock c ≥ D asks
    turns.end();
    vm.push_s = push_timer.seconds();

    vm.clock = clock.c_local();
    vm.c_global = c_global;
    vm.staleness = staleness;
    vwlog.step(step, lr, t, vm, fmt::format("clock {} (global {}) | staleness {}", clock.c_local(), c_global, staleness));
    // A checkpoint (wsp_checkpoint.h): everyone meets at this wave's end, takes the pull it now
    // allows (every VW's weights become w_global), and saves.
    const bool last = step + 1 == cfg.train.steps;
    if (vw_checkpoint_after(cfg, step)) {
      client.drain();  // every VW's waves up to here are on the server once all meet
      world.barrier();
      if (clock.waiting_for()) {  // the pull of every wave pushed so far (the clock's, made fresh)
        client.cancel_pull();
        client.request_pull(pushed - wave0);
        merge_pull(client.wait_pull(global) + wave0);
      } else {  // the end of a clock < D (only a run shorter than D + 1 waves ends there): no pull
        BATON_ASSERT(last, "WSP checkpoint at step {} of a clock that does not pull", step + 1);
      }
      if (!last || own.empty()) session.save(step + 1, lr);
      world.barrier();  // every VW's file is complete before the marker names the step
      if (world.rank() == 0 && (!last || own.empty())) publish_wsp_checkpoint(cfg, world.size(), step + 1);
    }
  }
  // Collective: every VW has pushed all its waves before anyone frees the windows.
  vwlog.finish(world, vws, "waiting for the parameter server");
  return vwlog.summary();
}

}  // namespace baton
