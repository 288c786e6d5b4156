// WSP's deterministic mode (issue 13 item 7, issue 23 item 1; docs/hetpipe.md "Deterministic mode";
// hetero.deterministic = true), for virtual workers of any number of stages.
//
// What can differ between two WSP runs of one config is only what crosses VWs: the parameter
// server. With hetero.placement = "default" only each VW's first stage (its leader) touches it,
// and only inside two hooks: before a forward (the pull's take, or the wait for the pull that
// gates the minibatch, and the merge) and after an update (the push at a wave's end). Everything
// else — the pipeline inside a VW, its stages' compute — is a function of the weights already.
// So a turn is one hook call of one VW's leader: F(k), "before the forward of minibatch k", or
// U(j), "after the update of minibatch j". Turns are serialized by a token; compute between two
// hooks runs concurrently (a leader waits for the token only at its next hook). Every read and
// write of the server — which c_global a pull sees, the order in which the server folds a wave's
// floats — then happens in one fixed global order, a function of the config: the run is
// reproducible bit for bit.
//
// The order (deterministic_turns): each VW's leader calls its hooks in a fixed sequence — with L
// minibatches in flight on its first stage (L = Nm for a pipelined VW running `hetpipe`, 1 for a
// one-stage VW's flush per minibatch), F(k) comes after U(k − L) and before U(k − L + 1) — per
// segment between checkpoints (the pipeline drains there). The turns interleave these sequences:
// at each turn a VW whose next hook can run now is drawn with probability ∝ its relative speed
// (1 / the largest hetero.slowdown of its ranks; jitter left out), from a generator seeded by
// train.seed and the segment. A hook can run unless it is the forward a pull gates and c_global
// (the waves every VW has pushed, in the turns so far) is below what the pull needs — the clock
// rule is wsp::WorkerClock's, driven here as the leader's own clock is. A take that c_global
// allows at F(k) merges there (the runtime's take is one try, on the training thread).
//
// The token travels over the world communicator (point-to-point, tag kTurnTag); a rank waiting for
// it polls MPI_Test with sleeps (50 µs doubling up to 1 ms), so waiting ranks leave the cores to
// the ones computing. Checkpoints cut the order (all VWs meet at a segment's end: every VW's turns
// of a segment come before any of the next), so a resumed run replays the rest of it.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "config/config.h"
#include "dist/comm.h"
#include "dist/layout.h"

namespace baton {
namespace dist {
class ServerClient;
}

struct Turn {
  enum Hook : uint8_t { FORWARD, UPDATE };
  int vw = 0;
  Hook hook = FORWARD;
  int64_t minibatch = 0;  // 1-based, over the run
  bool operator==(const Turn&) const = default;
};

// The run's order of turns (see above): 2 · train.steps turns per VW.
std::vector<Turn> deterministic_turns(const Config& cfg, const dist::Layout& layout);

// One VW leader's side of the turns. Off (begin/end do nothing, gated_pull blocks in
// ServerClient::wait_pull) unless cfg.hetero.deterministic.
class WspTurns {
 public:
  static constexpr int kTurnTag = 31013;  // the world communicator's only other p2p tag is run_trace's 31000

  // `vw`: this rank's VW. Rank 0 logs the schedule.
  WspTurns(const Config& cfg, dist::Comm& world, const dist::Layout& layout, int vw);
  bool on() const { return on_; }
  // `first_step`: the step the loop starts at: 0, or a resumed run's checkpoint, a multiple of
  // checkpoint.every, where the order is cut; else an Error.
  void start_at(int64_t first_step);

  // At the start of the leader's hook (`hook`, `minibatch`): waits for the token of the previous
  // turn (another VW's); an internal error if the hook is not the one the order expects.
  void begin(Turn::Hook hook, int64_t minibatch);
  // The requested pull that gates the VW's next minibatch: off, blocks until the server allows it;
  // on, it must be allowed already (internal error otherwise).
  int64_t gated_pull(dist::ServerClient& client, std::vector<float>& out);
  // At the end of the hook: hands the token to the leader of the next turn (another VW's).
  void end();
  // Inside a turn (between begin and end), and its index in the run's order (for the WSP trace).
  bool in_turn() const { return in_turn_; }
  int64_t turn() const { return current_; }

 private:
  bool on_ = false;
  dist::Comm* world_ = nullptr;
  int vw_ = 0;
  int64_t every_ = 0;          // checkpoint.every: where the order is cut
  std::vector<Turn> order_;
  std::vector<int> rank_of_;   // each VW's leader
  std::vector<int64_t> mine_;  // this VW's turns, in order
  size_t next_ = 0;            // index into mine_ of the next turn
  int64_t first_turn_ = 0;     // the run's first turn (a resumed run starts at a cut of the order)
  int64_t current_ = -1;
  bool in_turn_ = false;
};

}  // namespace baton
