// One rank = one WSP virtual worker of one stage (see wsp_trainer.h for the rules).
#include "train/wsp_trainer.h"

#include <algorithm>
#include <deque>
#include <utility>
#include <vector>

#include "config/virtual_workers.h"
#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "dist/mpi_comm.h"
#include "dist/param_server.h"
#include "dist/self_comm.h"
#include "optim/lr_schedule.h"
#include "train/loss_spike.h"
#include "train/metrics.h"
#include "train/session.h"
#include "wsp/worker_clock.h"

namespace baton {
namespace {

// VW k's rows of each global batch: data-parallel rank k's slice (wsp_trainer.h). Validation
// batches are the same for every VW: each evaluates its own w_local on them.
class VwRows final : public BatchSource {
 public:
  VwRows(std::unique_ptr<BatchSource> inner, int row0, int rows) : inner_(std::move(inner)), row0_(row0), rows_(rows) {}
  void train_rows(int64_t step, int row, int n, HostBatch& out) const override {
    inner_->train_rows(step, row0_ + row, n, out);
  }
  bool has_valid() const override { return inner_->has_valid(); }
  void valid_rows(int batch, int rows, int row, int n, HostBatch& out) const override {
    inner_->valid_rows(batch, rows, row, n, out);
  }
  int64_t valid_samples() const override { return inner_->valid_samples(); }
  std::string describe() const override {
    return fmt::format("{} | this VW: rows [{}, {}) of each global batch", inner_->describe(), row0_, row0_ + rows_);
  }
  std::string baseline() const override { return inner_->baseline(); }

 private:
  std::unique_ptr<BatchSource> inner_;
  int row0_, rows_;
};

// What the VW merges at a pull: w_global as of c_global (every VW's waves 0 … c_global − 1) plus
// its own pushed waves c_global … pushed − 1 that the server holds back in their slots.
wsp::VersionVector pulled_version(int num_vw, int64_t c_global, int vw, int pushed, int nm) {
  wsp::VersionVector v(num_vw);
  for (int k = 0; k < num_vw; ++k) v.add_range(k, 1, static_cast<int>(c_global) * nm);
  v.add_range(vw, static_cast<int>(c_global) * nm + 1, pushed * nm);
  return v;
}

// Observed staleness of minibatch p's weights: how many of the newest minibatch indices 1 … p − 1
// are missing from some VW (0 = every VW's updates through p − 1). Bounded by s_global (§5).
int observed_staleness(const wsp::VersionVector& w, int p, int num_vw) {
  int reach = p - 1;
  for (int k = 0; k < num_vw; ++k) reach = std::min(reach, w.prefix(k));
  return p - 1 - reach;
}

}  // namespace

TrainSummary train_wsp(const Config& cfg, dist::Comm& world) {
  auto* mpi = dynamic_cast<dist::MpiComm*>(&world);
  BATON_REQUIRE(mpi != nullptr, "hetero.sync = \"wsp\" needs the MPI runtime (its parameter server is one-sided MPI)",
                "run `baton train` (under mpirun for several virtual workers)");
  const std::vector<std::vector<int>> vws = virtual_worker_ranks(cfg.hetero, world.size());
  const int N = static_cast<int>(vws.size());
  const int vw = virtual_worker_of(vws, world.rank());
  const int rows = cfg.train.global_batch / N;  // validate(): a multiple of micro_batch × N

  // The VW's own session: the whole model on this rank, its minibatch = its rows of each batch.
  Config local = cfg;
  local.hetero = HeteroConfig{};
  local.train.global_batch = rows;
  local.dp = 1;
  ModelAndData md = model_and_data(local);
  md.data = std::make_unique<VwRows>(std::move(md.data), vw * rows, rows);
  dist::SelfComm alone;
  TrainSession session(local, alone, std::move(md.builder), std::move(md.data));
  session.log_header();
  const wsp::WspParams params{.num_vw = N, .nm = cfg.hetero.nm, .staleness = cfg.hetero.staleness};
  log::info("WSP (HetPipe §5): {} virtual workers of one rank each | Nm = {} minibatches per wave | D = {} | "
            "s_global = {} | minibatch = {} rows of each global batch of {} | parameter server: {} shards "
            "(tensors round robin), one-sided MPI | no checkpoints under WSP yet",
            N, params.nm, params.staleness, wsp::s_global(params.staleness, params.nm), rows,
            cfg.train.global_batch, world.size());

  SequentialModel& model = session.model();
  Backend& be = session.backend();
  std::vector<dist::TensorSpan> spans;
  for (int i = 0; i < model.table().size(); ++i) spans.push_back({model.table().offset(i), model.table().numel(i)});
  dist::ParamServer server(mpi->handle(), std::move(spans), N, params.staleness);
  const size_t F = model.flat_size();
  // Host mirrors: w = w_local (the device's params), partial = ũ_partial (own finished updates of
  // the wave not pushed yet), global = the last pulled w_global (gaps between tensors as in w),
  // own = the VW's pushed waves not yet in w_global (at most D + 1 of them).
  std::vector<float> w(F), after(F), partial(F, 0.0f), global(F);
  std::deque<std::pair<int, std::vector<float>>> own;
  be.to_host(w.data(), model.params(), F * sizeof(float));
  server.init(w.data());  // every VW starts from the same w0 (same seed)
  global = w;

  wsp::WorkerClock clock(vw, params, static_cast<int>(cfg.train.steps));
  int c_global = 0, pushed = 0;
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

  if (world.rank() == 0) write_resolved_config(cfg, cfg.run.dir);
  MetricsWriter metrics(cfg.run.dir, false, vw == 0 ? "metrics.jsonl" : fmt::format("metrics-vw{}.jsonl", vw));
  const LrSchedule sched = lr_schedule(cfg.optim, cfg.train.steps);
  TrainSummary summary;
  double wait_total = 0, loss_window = 0;
  int window = 0;
  Timer run_timer;
  LossSpikeGuard spikes(cfg.train.spike_factor, cfg.train.spike_window);  // each VW's own losses
  for (int64_t step = 0; step < cfg.train.steps; ++step) {
    // A pull the server already allows returns now (fresher weights); one that gates this
    // minibatch is waited for, sleeping (dist/param_server.h).
    double wait = 0;
    if (const std::optional<int> needs = clock.waiting_for()) {
      if (clock.startable()) {
        if (const std::optional<int64_t> c = server.try_pull(*needs, global.data())) merge_pull(*c);
      } else {
        double waited = 0;
        merge_pull(server.pull(*needs, global.data(), &waited));
        wait = waited;
      }
    }
    wait_total += wait;
    const int p = clock.start();
    const int staleness = observed_staleness(clock.weights_of(p), p, N);
    BATON_ASSERT(staleness <= wsp::s_global(params.staleness, params.nm), "VW {}: minibatch {} staleness {} > s_global",
                 vw, p, staleness);
    const double lr = sched.at(step);
    const TimedStep t = session.step(step, lr);
    if (const std::optional<std::string> spike = spikes.check(step + 1, t.result.loss))
      throw Error(fmt::format("virtual worker {}: {}", vw, *spike),
                  "lower optim.lr or raise optim.warmup_steps, or raise train.spike_factor (0 turns the check off)");
    // u_p = the optimizer's effect on the weights; w_local already holds it (§4: applied at once).
    be.to_host(after.data(), model.params(), F * sizeof(float));
    for (size_t j = 0; j < F; ++j) partial[j] += after[j] - w[j];
    std::swap(w, after);
    Timer push_timer;
    if (const std::optional<wsp::WorkerClock::Push> push = clock.finish()) {
      server.push(vw, push->wave, partial.data());  // w_global += ũ once every VW pushed the wave
      ++pushed;
      own.emplace_back(push->wave, partial);
      std::fill(partial.begin(), partial.end(), 0.0f);
    }
    const double push_s = push_timer.seconds();

    summary.steps_done++;
    summary.last_step = step + 1;
    summary.last_loss = t.result.loss;
    loss_window += t.result.loss;
    window++;
    StepMetrics m = session.metrics(step, lr, t);
    m.vw = VwMetrics{.vw = vw, .clock = clock.c_local(), .c_global = c_global, .staleness = staleness,
                     .wait_s = wait, .wait_total_s = wait_total, .push_s = push_s};
    const bool last = step + 1 == cfg.train.steps;
    if ((cfg.train.eval_every > 0 && (step + 1) % cfg.train.eval_every == 0) || last)
      if (const std::optional<EvalResult> r = session.evaluate()) {
        m.val_loss = r->loss;
        summary.last_val_loss = r->loss;
      }
    if ((step + 1) % cfg.train.log_every == 0 || last || step == 0 || m.val_loss) {
      metrics.write(m);
      log::info("vw {} step {:>6}/{} | loss {:.4f}{} | lr {:.2e} | clock {} (global {}) | staleness {} | "
                "waited {:.1f} ms ({:.2f} s in all) | {:.0f} ms",
                vw, step + 1, cfg.train.steps, loss_window / window,
                m.val_loss ? fmt::format(" | val {:.4f}", *m.val_loss) : std::string(), lr, clock.c_local(),
                c_global, staleness, 1e3 * wait, wait_total, 1e3 * t.seconds);
      loss_window = 0;
      window = 0;
    }
  }
  log::info("vw {}: {} minibatches in {:.1f} s, {:.2f} s ({:.0f}%) waiting for the parameter server", vw,
            summary.steps_done, run_timer.seconds(), wait_total, 100 * wait_total / std::max(1e-9, run_timer.seconds()));
  // Every VW has pushed all its waves before anyone frees the windows (collective).
  world.barrier();
  return summary;
}

}  // namespace baton
