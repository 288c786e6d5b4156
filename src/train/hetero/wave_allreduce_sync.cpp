// hetero.sync = "allreduce" (HetPipe's synchronous baseline; train/hetero/virtual_worker_sync.h): every VW
// (one rank) trains its waves of Nm minibatches locally; at the end of wave c every VW's weights
// become w_start(c) + (Σ_k ũ_k) / N with ũ_k = w_end_k − w_start(c), the VW's own wave update.
// Checkpoints at wave ends (checkpoint.every is a multiple of Nm; the run's end is one): every VW's
// weights are the same there, each saves its own file. A stop (SIGINT/SIGTERM on any rank) is
// agreed with each wave's all-reduce and taken at that wave's end, with a checkpoint.
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "core/stop_signal.h"
#include "train/hetero/virtual_worker_sync.h"

namespace baton {
namespace {

// The emulated device's stretch of each compute op: the step's only hook here.
class StretchHooks final : public UpdateHooks {
 public:
  explicit StretchHooks(const ComputeStretch& stretch) : stretch_(stretch) {}
  void before_forward(int64_t, int64_t, WeightVersions*, int64_t) override {}
  void after_update(int64_t, WeightVersions*, int64_t) override {}
  void after_compute(int64_t minibatch, WorkTime t) override { slept_ += stretch_.stretch(t, minibatch); }
  double take_slept() { return std::exchange(slept_, 0.0); }

 private:
  const ComputeStretch& stretch_;
  double slept_ = 0;
};

class WaveAllreduceSync final : public VirtualWorkerSync {
 public:
  WaveAllreduceSync(const Config& cfg, dist::Comm& world, const dist::Layout& layout)
      : VirtualWorkerSync(cfg, world, layout), hooks_(stretch_) {
    BATON_ASSERT(world.size() == num_vw_, "the wave all-reduce runs virtual workers of one rank each");
  }

  UpdateHooks* hooks() override { return &hooks_; }

  void header(TrainSession&) override {
    log::info("allreduce between virtual workers (HetPipe's synchronous baseline): {} virtual workers of one "
              "rank each | Nm = {} minibatches per wave | at each wave's end every VW's weights become the wave's "
              "start + the mean of the VWs' wave updates | minibatch = {} rows of each global batch of {} | "
              "checkpoints at wave ends (train/hetero/wsp_checkpoint.h)",
              num_vw_, cfg_.hetero.nm, cfg_.train.global_batch / num_vw_, cfg_.train.global_batch);
  }

  void start_sync(TrainSession& session, int64_t first_step) override {
    SequentialModel& model = session.model();
    const size_t F = model.flat_size();
    start_.resize(F);
    u_.resize(F);
    // w0 (one seed) or the checkpoint's: the same everywhere.
    session.backend().to_host(start_.data(), model.params(), F * sizeof(float));
    // The parameters' positions in the flat buffer (the gaps between tensors stay as they are).
    in_tensor_.assign(F, 0);
    for (int i = 0; i < model.table().size(); ++i)
      std::fill_n(in_tensor_.begin() + static_cast<std::ptrdiff_t>(model.table().offset(i)), model.table().numel(i),
                  1);
    waves_ = static_cast<int>(first_step / cfg_.hetero.nm);
  }

  // Minibatch p = step + 1 runs on every VW's waves before its own wave plus its own minibatches
  // of this wave: it misses the other VWs' (p − 1) mod Nm newest minibatches. At the wave's end
  // the VWs' wave updates are averaged (the all-reduce waits for the slowest VW: wait = idle), and
  // whether any rank was asked to stop is agreed.
  VwMetrics sync_step(TrainSession& session, int64_t step) override {
    const int nm = cfg_.hetero.nm;
    VwMetrics vm{.clock = static_cast<int>(step / nm), .staleness = num_vw_ > 1 ? static_cast<int>(step % nm) : 0};
    vm.slowdown = stretch_.factor(step + 1);
    vm.stretch_s = hooks_.take_slept();
    if ((step + 1) % nm == 0) {
      SequentialModel& model = session.model();
      Backend& be = session.backend();
      const size_t F = start_.size();
      Timer sync_timer;
      be.to_host(u_.data(), model.params(), F * sizeof(float));
      for (size_t j = 0; j < F; ++j) u_[j] = in_tensor_[j] ? u_[j] - start_[j] : 0.0f;
      Timer wait_timer;
      world_.all_reduce(u_.data(), F, DType::F32, dist::ReduceOp::SUM);  // waits for the slowest VW
      vm.wait_s = vm.idle_s = wait_timer.seconds();
      const float inv_n = 1.0f / static_cast<float>(num_vw_);
      for (size_t j = 0; j < F; ++j) start_[j] += u_[j] * inv_n;
      be.to_device(model.params(), start_.data(), F * sizeof(float));
      model.refresh_compute_params();
      ++waves_;
      if (agree_stop(stop_requested())) stop_wave_end_ = step + 1;
      vm.push_s = sync_timer.seconds() - vm.wait_s;
    }
    // clock = the wave this minibatch belongs to, c_global = waves averaged after it.
    vm.c_global = waves_;
    return vm;
  }

  std::string describe(const VwMetrics& vm) const override {
    return fmt::format("wave {} ({} averaged)", vm.clock, vm.c_global);
  }
  const char* waiting_for() const override { return "in the all-reduce (waiting for the other virtual workers included)"; }
  std::optional<int64_t> stop_at() const override {
    if (stop_wave_end_ > 0) return stop_wave_end_;
    return std::nullopt;
  }

  // Every VW's weights are the same at a wave's end: each saves its own file.
  std::string save(TrainSession& session, int64_t step, double lr) override {
    return save_and_publish(session, step, lr, true);
  }
  bool stop_after(TrainSession&, int64_t step) override { return stop_wave_end_ == step + 1; }

 private:
  StretchHooks hooks_;
  std::vector<float> start_, u_;  // w at the wave's start (the same on every VW), the wave update
  std::vector<char> in_tensor_;
  int waves_ = 0;
  int64_t stop_wave_end_ = -1;
};

}  // namespace

std::unique_ptr<CrossGroupSync> make_wave_allreduce_sync(const Config& cfg, dist::Comm& world,
                                                         const dist::Layout& layout) {
  return std::make_unique<WaveAllreduceSync>(cfg, world, layout);
}

}  // namespace baton
