// CrossGroupSync: what keeps the groups of a Layout in sync beyond each group's own step — the one
// thing that differs between homogeneous training, HetPipe's wave all-reduce baseline and WSP
// (DESIGN §2; docs/hetpipe.md). The one training loop (train/loop/trainer.h) calls it at the points it
// has: before the session exists (the step's hooks: before each minibatch's forward and after
// each update, train/loop/step_runner.h), at the start (resume), after each step (a wave's end, its
// metrics, a stop request), at checkpoints (a meeting of every group when they do not step in
// lockstep) and at the end.
//
// Implementations: LockstepSync (train/loop/lockstep_sync.h: every rank steps together — the
// data-parallel groups all-reduce gradients inside the step), and for virtual workers the wave
// all-reduce and WSP (train/hetero/wave_allreduce_sync.h, train/hetero/wsp_sync.h; made by
// train/hetero/virtual_worker_sync.h's make_virtual_worker_sync).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "config/config.h"
#include "dist/comm.h"
#include "dist/layout.h"
#include "train/observe/metrics.h"
#include "train/loop/session.h"

namespace baton {

struct TrainSummary;

class CrossGroupSync {
 public:
  virtual ~CrossGroupSync() = default;

  // What the session needs before it exists: the step's hooks, an emulated device's memory.
  virtual SessionOptions session_options() { return {}; }
  // The session exists (collective over the world): the strategy's own setup and header lines.
  virtual void attach(TrainSession& /*session*/) {}
  // Restores the checkpoint the run continues from (collective); returns its step, or nullopt
  // when the run starts from scratch.
  virtual std::optional<int64_t> resume(TrainSession& session) = 0;
  // Once resumed, before the first step (collective): state that starts from the weights.
  virtual void start(TrainSession& /*session*/, int64_t /*first_step*/) {}

  // This rank writes its group's metrics and log lines; the file in run.dir they go to.
  virtual bool reports() const = 0;
  virtual std::string metrics_file() const { return "metrics.jsonl"; }
  // This rank holds its group's step loss (the loss guard checks it here).
  virtual bool holds_loss() const = 0;
  // A loss spike on this rank's group ends the job: throws, on the ranks that hold the loss.
  [[noreturn]] virtual void spike(const std::string& what, const std::string& hint) = 0;
  // Whether a spike may set checkpoints aside and rewind (train.on_spike = "rewind"): every rank
  // holds the same loss, so all decide alike and reload one checkpoint together.
  virtual bool can_rewind() const { return false; }

  // After each step, its update applied: a wave's synchronisation, a stop this process was asked
  // for, the strategy's part of the step's metrics (m.vw).
  virtual void after_step(TrainSession& /*session*/, int64_t /*step*/, StepMetrics& /*m*/) {}
  // The log line's prefix and suffix for the strategy ("vw 1 ", " | clock 3 ...").
  virtual std::string line_prefix() const { return ""; }
  virtual std::string line_suffix(const StepMetrics& /*m*/) const { return ""; }

  // Whether a checkpoint follows step `step` (0-based), and writing it (with the meeting it
  // needs); returns the path written ("" when none). Collective over the world.
  virtual bool checkpoint_after(int64_t step) const = 0;
  virtual std::string save(TrainSession& session, int64_t step, double lr) = 0;
  // Whether the run stops after step `step` on a signal: the same answer on every rank.
  virtual bool stop_after(TrainSession& session, int64_t step) = 0;
  // The run ended after `last_step` steps (collective): the final checkpoint when it is not
  // written yet, the strategy's summary lines, its connections closed.
  virtual void finish(TrainSession& session, TrainSummary& summary, int64_t start_step, int64_t saved_step,
                      double lr) = 0;
};

// Makes the strategy once the Layout is known (before the session).
using SyncFactory =
    std::function<std::unique_ptr<CrossGroupSync>(const Config& cfg, dist::Comm& world, const dist::Layout& layout)>;

}  // namespace baton
