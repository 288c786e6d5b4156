// A virtual worker's WSP clock (see worker_clock.h for the rules and their sources).
#include "wsp/worker_clock.h"

#include "core/error.h"

namespace baton::wsp {

WorkerClock::WorkerClock(int vw, const WspParams& params, int minibatches, Trace* trace, int first_wave)
    : vw_(vw), params_(params), limit_(minibatches), trace_(trace), local_(params.num_vw),
      pending_(params.num_vw) {
  check_params(params);
  BATON_ASSERT(vw >= 0 && vw < params.num_vw, "worker clock: VW {} of {}", vw, params.num_vw);
  BATON_ASSERT(minibatches >= 0 && minibatches % params.nm == 0,
               "worker clock: {} minibatches is not a whole number of waves of {}", minibatches, params.nm);
  BATON_ASSERT(first_wave >= 0 && (limit_ == 0 || first_wave * params.nm <= limit_), "worker clock: first wave {}",
               first_wave);
  next_ = first_wave * params.nm + 1;
  finished_ = first_wave * params.nm;
  pushed_ = c_local_ = first_wave;
  for (int k = 0; k < params.num_vw; ++k) local_.add_range(k, 1, first_wave * params.nm);
}

void WorkerClock::emit(Event e) {
  e.vw = vw_;
  if (trace_) trace_->push_back(std::move(e));
}

void WorkerClock::tick() {
  ++c_local_;
  emit({.kind = EventKind::CLOCK, .clock = c_local_});
}

std::optional<int> WorkerClock::startable() const {
  const int p = next_;
  if (limit_ > 0 && p > limit_) return std::nullopt;
  if (p - params_.nm > finished_) return std::nullopt;  // local rule: p − Nm must have finished
  // The pull of clock c gates minibatch (c+2)·Nm; it has returned once c_local > c.
  if (const auto c = gating_clock(p, params_.nm, params_.staleness); c && c_local_ <= *c) return std::nullopt;
  return p;
}

int WorkerClock::start() {
  const auto p = startable();
  BATON_ASSERT(p.has_value(), "VW {}: minibatch {} may not start yet", vw_, next_);
  in_flight_.push_back({*p, local_});
  ++next_;
  emit({.kind = EventKind::START, .minibatch = *p, .clock = c_local_, .weights = local_});
  return *p;
}

const VersionVector& WorkerClock::weights_of(int p) const {
  for (const InFlight& f : in_flight_)
    if (f.minibatch == p) return f.weights;
  BATON_ASSERT(false, "VW {}: minibatch {} is not in flight", vw_, p);
  return local_;  // unreachable
}

std::optional<WorkerClock::Push> WorkerClock::finish() {
  BATON_ASSERT(!in_flight_.empty(), "VW {}: nothing in flight to finish", vw_);
  const int p = in_flight_.front().minibatch;
  in_flight_.pop_front();
  finished_ = p;
  local_.add(vw_, p);  // w_local += u_p, at once (§4)
  pending_.add(vw_, p);
  emit({.kind = EventKind::FINISH, .minibatch = p, .clock = c_local_});
  if (p % params_.nm != 0) return std::nullopt;

  // End of clock c: push ũ of wave c (§5), then pull when c ≥ D.
  const int c = wave_of(p, params_.nm);
  BATON_ASSERT(c == pushed_ && c == c_local_ && !pull_needs_,
               "VW {}: wave {} ended with {} waves pushed, c_local {}", vw_, c, pushed_, c_local_);
  Push push{c, std::move(pending_)};
  pending_ = VersionVector(params_.num_vw);
  ++pushed_;
  emit({.kind = EventKind::PUSH, .wave = c, .clock = c_local_});
  if (pulls_at_end_of(c, params_.staleness)) {
    pull_needs_ = pull_needs_c_global(c, params_.staleness);
    emit({.kind = EventKind::PULL_WAIT, .wave = c, .clock = *pull_needs_});
  } else {
    tick();  // the first D waves run without querying the server
  }
  return push;
}

void WorkerClock::complete_pull(const VersionVector& global) {
  BATON_ASSERT(pull_needs_.has_value(), "VW {}: a pull returned but none is outstanding", vw_);
  const int c = pushed_ - 1;
  // w_global holds exactly the VW's own pushed waves 0..c: its pushes reach the server first, and
  // wave c+1 cannot end before this pull returns (it gates wave c+1's last minibatch).
  BATON_ASSERT(global.count(vw_) == pushed_ * params_.nm && global.prefix(vw_) == pushed_ * params_.nm,
               "VW {}: pull of clock {} returned own updates {}, expected 1..{}", vw_, c, global.to_string(),
               pushed_ * params_.nm);
  // Merge rule (worker_clock.h): w_local = w_global + own finished updates not in it.
  local_ = global;
  local_.merge(pending_);
  pull_needs_.reset();
  emit({.kind = EventKind::PULL, .wave = c, .clock = c_local_});
  tick();
}

}  // namespace baton::wsp
