// The cross-group strategies of virtual workers (VWs: groups of the Layout that are not
// data-parallel replicas; docs/hetpipe.md), on the one training loop:
// - hetero.sync = "wsp" (train/hetero/wsp_sync.cpp): each VW trains on its own minibatches — VW k's
//   minibatch p is rows [k·b, (k+1)·b) of global batch p − 1, b = train.global_batch / N, exactly
//   data-parallel rank k's slice of step p − 1 — and stays in sync with the others through WSP's
//   parameter server (train/hetero/wsp_stage.h); its optimizer state stays in the VW; the loop's steps
//   are the VW's own minibatches, at its own pace.
// - hetero.sync = "allreduce" (train/hetero/wave_allreduce_sync.cpp, HetPipe's synchronous, Horovod-like
//   baseline; VWs of one rank): the same VWs, data split and waves of Nm minibatches without a
//   parameter server: at the end of every wave each VW's wave update ũ_k = w_end_k − w_start is
//   all-reduced and every VW sets w = w_start + Σ_k ũ_k / N (staleness 0 between waves). With
//   Nm = 1 and plain SGD it is data parallelism at the same lr.
// Either may emulate a heterogeneous cluster on one machine (config/device_emulation.h): each
// rank's compute is stretched by its slowdown (train/hetero/compute_stretch.h) and its backend refuses
// memory beyond its limit. Each VW writes its metrics (metrics.jsonl for VW 0,
// metrics-vw<k>.jsonl for VW k, from its last stage, which has the loss) and its checkpoint files
// (train/hetero/wsp_checkpoint.h: every VW meets at a wave's end, saves its own file, rank 0 publishes the
// marker); at the end rank 0 logs every VW's minibatches/s, throughput, waiting and idle time, and
// the job's throughput and MFU.
#pragma once
#include <array>
#include <memory>
#include <optional>
#include <string>

#include "config/device_emulation.h"
#include "train/hetero/compute_stretch.h"
#include "train/loop/cross_group_sync.h"
#include "train/hetero/wsp_checkpoint.h"

namespace baton {

// The strategy of a virtual-worker layout (hetero.sync); collective over `world` (the factory is
// called on every rank at the same point of train()).
std::unique_ptr<CrossGroupSync> make_virtual_worker_sync(const Config& cfg, dist::Comm& world,
                                                         const dist::Layout& layout);

// What both VW strategies share: the VW's place, emulated device, resume, metrics and summary.
class VirtualWorkerSync : public CrossGroupSync {
 public:
  VirtualWorkerSync(const Config& cfg, dist::Comm& world, const dist::Layout& layout);

  SessionOptions session_options() override;
  void attach(TrainSession& session) override;
  std::optional<int64_t> resume(TrainSession& session) override;
  // The strategy's own start, then the VW's clock for minibatches/s starts (as the loop does).
  void start(TrainSession& session, int64_t first_step) final;
  bool reports() const override { return stage_ == layout_.pipeline(vw_).pp - 1; }  // the last stage has the loss
  std::string metrics_file() const override;
  bool holds_loss() const override { return reports(); }
  [[noreturn]] void spike(const std::string& what, const std::string& hint) override;
  void after_step(TrainSession& session, int64_t step, StepMetrics& m) override;
  std::string line_prefix() const override;
  std::string line_suffix(const StepMetrics& m) const override;
  bool checkpoint_after(int64_t step) const override;
  void finish(TrainSession& session, TrainSummary& summary, int64_t start_step, int64_t saved_step,
              double lr) override;

 protected:
  // The step's hooks (WSP's stage, or the compute stretch alone).
  virtual UpdateHooks* hooks() = 0;
  // The strategy's state after step `step` (its synchronisation at a wave's end done here).
  virtual VwMetrics sync_step(TrainSession& session, int64_t step) = 0;
  // Its part of the log line ("clock 3 (global 2) | staleness 1") and what the VWs wait for.
  virtual std::string describe(const VwMetrics& vm) const = 0;
  virtual const char* waiting_for() const = 0;
  // Its first header line (rank 0), its state once resumed (collective) and its connections
  // closed at the end (collective).
  virtual void header(TrainSession& session) = 0;
  virtual void start_sync(TrainSession& /*session*/, int64_t /*first_step*/) {}
  virtual void close() {}
  // The stop step agreed on a signal (before train.steps), when one is.
  virtual std::optional<int64_t> stop_at() const { return std::nullopt; }
  // A checkpoint's last part, once every VW's weights are what it saves: every VW writes its file,
  // rank 0 publishes the marker once all did; then all agree whether a stop was asked for.
  // Returns the path written ("" when `write` is false: a clock that does not pull at the run's end).
  std::string save_and_publish(TrainSession& session, int64_t step, double lr, bool write);
  // Every rank's answer to "was this process asked to stop?" (collective at a meeting).
  bool agree_stop(bool mine);

  const Config& cfg_;
  dist::Comm& world_;
  const dist::Layout layout_;
  const int vw_, stage_, num_vw_;
  RankEmulation mine_;
  ComputeStretch stretch_;
  std::optional<WspResume> resume_;
  int64_t stop_agreed_at_ = -1;  // a meeting after this step agreed to stop

 private:
  enum Total { kMinibatches, kSeconds, kWait, kIdle, kStretch, kFactors, kReports, kTokens, kFlops, kTotals };
  std::array<double, kTotals> totals_{};
  Timer run_timer_;
  double peak_ = 0;
  bool images_ = false;
};

}  // namespace baton
