// A virtual worker's side of WSP (HetPipe §4 and §5; digest §A.2, §B): which minibatch may start,
// which weights it uses, when a wave is pushed, when the VW pulls and waits, and how the pulled
// w_global is merged with the VW's own updates. The runtime calls it around real tensors; the
// deterministic interleaving (interleaving.h) drives it in tests. Every call that changes state
// appends its event to the trace.
//
// Rules, with their sources:
// - Local rule (§4): at most Nm minibatches in flight; minibatch p starts as soon as p − Nm has
//   finished (minibatches 1..Nm start on w0), in minibatch order, and finishes in order (backwards
//   in minibatch order). A finished minibatch's update is applied at once: w_local += u_p.
// - Push (§5): finishing the last minibatch of wave c pushes ũ = Σ u_p over wave c, tagged c.
// - Pull and wait (§5): at the end of clock c ≥ D the VW pulls w_global, which waits until every
//   VW has pushed wave c − D; meanwhile the first s_local minibatches of wave c+1 keep running, and
//   minibatch (c+2)·Nm (the next to start) waits for the pull.
// - Local clock: c_local = c from the moment the VW may run wave c's last minibatch until the
//   end-of-clock-c synchronisation completes — [W]: minibatches 5–7 run "while its local clock is
//   still 0". It becomes c+1 when the pull returns (or at the push, when clock c does not pull).
//   So c_global (waves every VW pushed) = min c_local once released pulls have returned.
// - Merge (ours; the papers leave it open, digest §B.7): when the pull of clock c returns
//   w_global, w_local = w_global + (the VW's own finished updates not in w_global). w_global holds
//   the VW's own waves 0..c (its pushes precede its pull on the same server) and no later own
//   update (wave c+1 cannot end before this pull returns), so the added part is exactly the
//   finished minibatches of wave c+1 — minibatch 11 in the D = 0 example sees global 1–4 plus its
//   own 5–7. A minibatch that waited for the pull therefore may see own updates beyond p − Nm that
//   finished during the wait (the paper: "uses the latest w_local"; [W]: may include "some recent
//   local updates").
#pragma once
#include <deque>
#include <optional>

#include "wsp/trace.h"
#include "wsp/version_vector.h"
#include "wsp/wave.h"

namespace baton::wsp {

class WorkerClock {
 public:
  // `minibatches` bounds the run (0: unbounded); `trace` (optional) receives this VW's events.
  // `first_wave` > 0 resumes at the start of that wave from a state where every VW's waves before
  // it are in w_local (a WSP checkpoint: train/hetero/wsp_checkpoint.h): minibatch first_wave·Nm + 1 is
  // next, c_local = first_wave, nothing in flight, no pull outstanding.
  WorkerClock(int vw, const WspParams& params, int minibatches = 0, Trace* trace = nullptr, int first_wave = 0);

  // The next minibatch, if the local rule and the pull gate let it start now.
  std::optional<int> startable() const;
  // Starts startable()'s minibatch on a copy of w_local; returns its number.
  int start();
  // The weights the in-flight minibatch `p` was started on.
  const VersionVector& weights_of(int p) const;

  struct Push {
    int wave;
    VersionVector update;  // the VW's minibatches of the wave
  };
  // Finishes the oldest in-flight minibatch (w_local += u_p); returns the push when it ends a wave.
  std::optional<Push> finish();

  // The c_global an outstanding pull waits for (nullopt: no pull outstanding).
  std::optional<int> waiting_for() const { return pull_needs_; }
  // The outstanding pull returned w_global (version vector `global`): apply the merge rule.
  void complete_pull(const VersionVector& global);

  int vw() const { return vw_; }
  int c_local() const { return c_local_; }
  int finished() const { return finished_; }
  int in_flight() const { return static_cast<int>(in_flight_.size()); }
  bool done() const { return limit_ > 0 && finished_ == limit_; }
  const VersionVector& local() const { return local_; }
  // Own finished updates not yet pushed (the partial ũ of the current wave).
  const VersionVector& pending() const { return pending_; }

 private:
  struct InFlight {
    int minibatch;
    VersionVector weights;
  };
  void emit(Event e);
  void tick();  // c_local += 1

  int vw_;
  WspParams params_;
  int limit_;
  Trace* trace_;
  int next_ = 1;      // next minibatch to start
  int finished_ = 0;  // minibatches 1..finished_ are done
  int pushed_ = 0;    // waves 0..pushed_-1 are pushed
  int c_local_ = 0;
  std::optional<int> pull_needs_;  // outstanding pull of clock pushed_-1: needs this c_global
  std::deque<InFlight> in_flight_;
  VersionVector local_, pending_;
};

}  // namespace baton::wsp
