// What the virtual-worker strategies share; see virtual_worker_sync.h.
#include "train/hetero/virtual_worker_sync.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "config/virtual_workers.h"
#include "core/bytes.h"
#include "core/error.h"
#include "core/log.h"
#include "core/stop_signal.h"
#include "dist/comm.h"
#include "train/loop/trainer.h"

namespace baton {
namespace {

// Rank 0 logs what every rank emulates (config/device_emulation.h: a pure function of the config).
void log_emulation(const std::vector<RankEmulation>& emu, const dist::Layout& layout, const HeteroConfig& h) {
  const double jitter = h.jitter;
  const std::string per = (h.jitter_span == 1 ? std::string("minibatch") : fmt::format("{} minibatches", h.jitter_span)) +
                          (h.jitter_probability < 1 ? fmt::format(" with probability {:.3g}", h.jitter_probability) : "") +
                          (h.jitter_scope == "vw" ? " (the VW's factors)" : "");
  for (size_t r = 0; r < emu.size(); ++r) {
    const RankEmulation& e = emu[r];
    if (!e.emulated() && e.device.empty() && jitter == 0) continue;
    log::info("rank {} (vw {}){}: compute x{:.3g}{}{} | memory limit {}", r, layout.place(static_cast<int>(r)).group,
              e.device.empty() ? std::string() : fmt::format(" emulates {}", e.device), e.slowdown,
              e.slowdown_from.empty() ? std::string() : fmt::format(" ({})", e.slowdown_from),
              jitter == 0 ? std::string() : fmt::format(" x a seeded factor in [1, {:.3g}] per {}", 1 + jitter, per),
              e.memory_limit == 0 ? std::string("none") : format_bytes(static_cast<double>(e.memory_limit)));
  }
}

}  // namespace

VirtualWorkerSync::VirtualWorkerSync(const Config& cfg, dist::Comm& world, const dist::Layout& layout)
    : cfg_(cfg), world_(world), layout_(layout), vw_(layout.place(world.rank()).group),
      stage_(layout.place(world.rank()).stage), num_vw_(layout.num_groups()),
      mine_(rank_emulation(cfg, world.size())[static_cast<size_t>(world.rank())]),
      stretch_(mine_.slowdown, cfg.hetero.jitter, cfg.train.seed, world.rank(), cfg.hetero.jitter_span,
               cfg.hetero.jitter_scope == "vw" ? vw_ : -1, cfg.hetero.jitter_probability) {
  // Emulated devices are CPU ranks sharing the machine's cores: a rank that waits must not keep a
  // core busy polling, or the ranks that compute run slower than their devices (dist/comm.h).
  // BATON_WAIT_POLICY=spin|sleep overrides the choice (side-by-side measurements of the two).
  const std::vector<RankEmulation> emu = rank_emulation(cfg, world.size());
  const bool emulated =
      cfg.hetero.jitter > 0 || std::any_of(emu.begin(), emu.end(), [](const RankEmulation& e) { return e.slowdown != 1; });
  const char* env = std::getenv("BATON_WAIT_POLICY");
  const std::string forced = env ? env : "";
  BATON_REQUIRE(forced.empty() || forced == "auto" || forced == "spin" || forced == "sleep",
                fmt::format("BATON_WAIT_POLICY={} is not a wait policy", forced),
                "set it to auto (sleep where devices are emulated), spin or sleep, or unset it");
  if (forced == "sleep" || (emulated && forced != "spin")) dist::set_wait_policy(dist::WaitPolicy::SLEEP);
}

SessionOptions VirtualWorkerSync::session_options() {
  return {.hooks = hooks(),
          .memory_limit = {.bytes = mine_.memory_limit, .rank = world_.rank(), .device = mine_.device}};
}

void VirtualWorkerSync::attach(TrainSession& session) {
  if (world_.rank() == 0) {
    log_emulation(rank_emulation(cfg_, world_.size()), layout_, cfg_.hetero);
    if (dist::wait_policy() == dist::WaitPolicy::SLEEP)
      log::info("waiting ranks sleep between MPI tests instead of polling (emulated devices share the cores; "
                "BATON_WAIT_POLICY=spin polls)");
  }
  peak_ = session.peak_tflops();
  images_ = session.builder().input_kind() == InputKind::IMAGES;
  header(session);
}

std::optional<int64_t> VirtualWorkerSync::resume(TrainSession& session) {
  // Every VW's file holds w_global of a wave's end; each VW loads its own (optimizer state
  // included), or VW 0's when the VWs changed (train/hetero/wsp_checkpoint.h).
  resume_ = find_wsp_resume(cfg_, world_, vw_);
  if (!resume_) return std::nullopt;
  session.load(resume_->path);  // the VW's stages read their layers of it
  log_wsp_resume(*resume_, num_vw_, cfg_.hetero.sync == SyncMode::WSP ? "WSP" : "allreduce");
  // Fewer VWs now: the files of the ones gone end at the checkpoint too (no VW writes them again;
  // records past the checkpoint would describe minibatches this run does over).
  if (resume_->elastic && world_.rank() == 0)
    for (int k = num_vw_; k < resume_->old_vws; ++k)
      truncate_metrics_after(fmt::format("{}/metrics-vw{}.jsonl", cfg_.run.dir, k), resume_->step);
  return resume_->step;
}

void VirtualWorkerSync::start(TrainSession& session, int64_t first_step) {
  start_sync(session, first_step);
  run_timer_.reset();
}

std::string VirtualWorkerSync::metrics_file() const {
  return vw_ == 0 ? "metrics.jsonl" : fmt::format("metrics-vw{}.jsonl", vw_);
}

// A VW's own loss spike ends the job: one message naming the VW (the other VWs hold other losses).
void VirtualWorkerSync::spike(const std::string& what, const std::string& hint) {
  throw Error(fmt::format("virtual worker {}: {}", vw_, what), hint);
}

void VirtualWorkerSync::after_step(TrainSession& session, int64_t step, StepMetrics& m) {
  VwMetrics vm = sync_step(session, step);
  vm.vw = vw_;
  totals_[kWait] += vm.wait_s;
  totals_[kIdle] += vm.idle_s;
  totals_[kStretch] += vm.stretch_s;
  totals_[kFactors] += vm.slowdown;
  totals_[kMinibatches] += 1;
  totals_[kTokens] += static_cast<double>(session.tokens_per_step());
  totals_[kFlops] += session.flops_per_step();
  vm.wait_total_s = totals_[kWait];
  vm.idle_total_s = totals_[kIdle];
  vm.minibatches_per_s = totals_[kMinibatches] / std::max(1e-9, run_timer_.seconds());
  m.vw = vm;
}

std::string VirtualWorkerSync::line_prefix() const { return fmt::format("vw {} ", vw_); }

std::string VirtualWorkerSync::line_suffix(const StepMetrics& m) const {
  if (!m.vw) return "";
  const VwMetrics& vm = *m.vw;
  return fmt::format(" | {} | waited {:.1f} ms, idle {:.1f} ms ({:.2f} s, {:.2f} s in all){} | {:.3g} minibatches/s",
                     describe(vm), 1e3 * vm.wait_s, 1e3 * vm.idle_s, vm.wait_total_s, vm.idle_total_s,
                     vm.slowdown != 1 ? fmt::format(" | compute x{:.3g}", vm.slowdown) : std::string(),
                     vm.minibatches_per_s);
}

bool VirtualWorkerSync::checkpoint_after(int64_t step) const {
  const std::optional<int64_t> stop = stop_at();
  return vw_checkpoint_after(cfg_, step) || (stop && *stop == step + 1);
}

std::string VirtualWorkerSync::save_and_publish(TrainSession& session, int64_t step, double lr, bool write) {
  std::string path;
  if (write) path = session.save(step + 1, lr);  // collective over the VW's ranks: one file per VW
  world_.barrier();  // every VW's file is complete before the marker names the step
  if (world_.rank() == 0 && write) publish_wsp_checkpoint(cfg_, world_.size(), step + 1);
  return path;
}

bool VirtualWorkerSync::agree_stop(bool mine) { return world_.all_reduce_scalar(mine ? 1.0 : 0.0) > 0; }

void VirtualWorkerSync::finish(TrainSession&, TrainSummary&, int64_t, int64_t, double) {
  close();
  // Every VW's totals to rank 0: one line per VW (its reporting stage's), then the job's.
  totals_[kSeconds] = run_timer_.seconds();
  totals_[kReports] = reports() ? 1 : 0;
  std::vector<double> all(totals_.size() * static_cast<size_t>(world_.size()));
  world_.all_gather(totals_.data(), all.data(), totals_.size(), DType::F64);
  double tokens_per_s = 0, flops_per_s = 0;
  for (int r = 0; r < world_.size(); ++r) {
    const double* x = all.data() + totals_.size() * static_cast<size_t>(r);
    if (x[kReports] == 0) continue;
    const double n = std::max(1.0, x[kMinibatches]), s = std::max(1e-9, x[kSeconds]);
    tokens_per_s += x[kTokens] / s;
    flops_per_s += x[kFlops] / s;
    log::info("vw {}: {:.0f} minibatches in {:.2f} s = {:.3g} minibatches/s (compute x{:.3g}{}) | {} {}/s | {:.2f} s "
              "({:.0f}%) {}, {:.2f} s idle ({:.0f}% of the waiting)",
              layout_.place(r).group, x[kMinibatches], x[kSeconds], x[kMinibatches] / s, x[kFactors] / n,
              x[kStretch] > 0 ? fmt::format(", {:.2f} s slept", x[kStretch]) : std::string(),
              human_count(x[kTokens] / s), images_ ? "img" : "tok", x[kWait], 100 * x[kWait] / s, waiting_for(),
              x[kIdle], 100 * x[kIdle] / std::max(1e-9, x[kWait]));
  }
  const double per_device = flops_per_s / 1e12 / world_.size();
  log::info("job: {} virtual workers on {} ranks | {} {}/s | {:.3f} TFLOP/s per device{}", num_vw_, world_.size(),
            human_count(tokens_per_s), images_ ? "img" : "tok", per_device,
            peak_ > 0 ? fmt::format(" | mfu {:.1f}%", 100 * per_device / peak_) : std::string());
}

std::unique_ptr<CrossGroupSync> make_wsp_sync(const Config& cfg, dist::Comm& world, const dist::Layout& layout);
std::unique_ptr<CrossGroupSync> make_wave_allreduce_sync(const Config& cfg, dist::Comm& world,
                                                         const dist::Layout& layout);

std::unique_ptr<CrossGroupSync> make_virtual_worker_sync(const Config& cfg, dist::Comm& world,
                                                         const dist::Layout& layout) {
  BATON_ASSERT(layout.virtual_workers(), "a virtual-worker strategy for the layout {}", layout.describe());
  if (cfg.hetero.sync == SyncMode::WSP) return make_wsp_sync(cfg, world, layout);
  return make_wave_allreduce_sync(cfg, world, layout);
}

}  // namespace baton
