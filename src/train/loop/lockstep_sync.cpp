// LockstepSync; see lockstep_sync.h.
#include "train/loop/lockstep_sync.h"

#include "core/error.h"
#include "core/log.h"
#include "dist/agree.h"
#include "train/loop/trainer.h"

namespace baton {
namespace {

class LockstepSync final : public CrossGroupSync {
 public:
  LockstepSync(const Config& cfg, dist::Comm& world) : cfg_(cfg), rank0_(world.rank() == 0) {}

  std::optional<int64_t> resume(TrainSession& session) override { return session.resume(); }
  bool reports() const override { return rank0_; }
  bool holds_loss() const override { return true; }  // the step's loss is reduced over the job
  // Every rank holds the same loss: all stop here, before this step's state can reach a
  // checkpoint, and the job reports it once.
  [[noreturn]] void spike(const std::string& what, const std::string& hint) override { throw AgreedError(what, hint); }
  bool can_rewind() const override { return true; }

  bool checkpoint_after(int64_t step) const override {
    return cfg_.checkpoint.every > 0 && (step + 1) % cfg_.checkpoint.every == 0;
  }
  std::string save(TrainSession& session, int64_t step, double lr) override { return session.save(step + 1, lr); }
  // Every rank stops after the same step, whichever of them got the signal.
  bool stop_after(TrainSession& session, int64_t) override { return session.stop_requested_anywhere(); }

  // The run's final checkpoint, unless the last step's is written already — or the state is not
  // one (an asynchronous pipeline stopped between drain points has micro-batches in flight on
  // older weight versions: it could not be resumed exactly).
  void finish(TrainSession& session, TrainSummary& summary, int64_t start_step, int64_t saved_step,
              double lr) override {
    if (!session.checkpointable())
      log::warn("stopped in the middle of an asynchronous pipeline segment ({} drains at multiples of "
                "checkpoint.every): no checkpoint written for step {}; the newest is {}",
                cfg_.parallel.schedule, summary.last_step,
                saved_step >= 0 ? fmt::format("step {}", saved_step) : std::string("none"));
    else if (saved_step != summary.last_step)
      summary.checkpoint_path = session.save(summary.last_step, lr);
    else if (start_step >= cfg_.train.steps)
      log::info("nothing to train: the checkpoint is at step {}, train.steps = {}", start_step, cfg_.train.steps);
  }

 private:
  const Config& cfg_;
  bool rank0_;
};

}  // namespace

std::unique_ptr<CrossGroupSync> make_lockstep_sync(const Config& cfg, dist::Comm& world, const dist::Layout&) {
  return std::make_unique<LockstepSync>(cfg, world);
}

}  // namespace baton
