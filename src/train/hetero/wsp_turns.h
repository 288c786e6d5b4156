// WSP's deterministic mode for virtual workers of one rank (issue 13 item 7; docs/hetpipe.md
// "Deterministic mode"; hetero.deterministic = true).
//
// The schedule: wsp::interleave (wsp/interleaving.h) with the run's WspParams, train.steps / Nm
// waves, each VW's relative speed = 1 / its rank's slowdown (config/device_emulation.h; jitter is
// left out) and seed = train.seed; its `order` names the VW that takes each turn. Every rank
// computes the same order from the config alone.
//
// Execution: turns are fully serialized. Turn i belongs to VW order[i]; its rank waits for a token
// from the rank of turn i − 1 (when that is another VW), then runs its next minibatch whole — the
// pull if one is outstanding (a pull that gates the minibatch must be satisfiable in turn order,
// so it is a try_pull, and a failure is a protocol bug: internal error naming the turn), the
// merge, start, compute, finish and push — and sends the token to the rank of turn i + 1. Every
// read and write of the parameter server thus happens in one fixed global order: which c_global a
// pull sees and the order in which the server folds a wave's floats are functions of the config,
// so the run is reproducible bit for bit. Turn i of a one-rank VW is the step of
// `Interleaving::order` that finishes the VW's next minibatch: there the minibatch had started
// already, so every pull that gates it is satisfied by the pushes of turns < i.
//
// The token travels over the world communicator (point-to-point, tag kTurnTag); a rank waiting
// for it polls MPI_Test with sleeps (50 µs doubling up to 1 ms), so waiting ranks leave the cores
// to the one that computes. Only one VW computes at a time: a test mode, not a fast one.
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

// The VW taking each turn (the run's wsp::interleave order): train.steps entries per VW. With
// checkpoint.every > 0, one interleaving per segment of `every` steps (seeds derived from
// train.seed and the segment's index), concatenated: every VW's turns of a segment come before any
// of the next one's, so all VWs meet at a checkpoint and a resumed run replays the rest of the
// order from that cut. VWs of one rank each (the layout's groups).
std::vector<int> deterministic_turns(const Config& cfg, const dist::Layout& layout);

// One VW's side of the turns. Off (begin/end do nothing, gated_pull blocks in
// ServerClient::wait_pull) unless cfg.hetero.deterministic.
class WspTurns {
 public:
  static constexpr int kTurnTag = 31013;  // the world communicator's only other p2p tag is run_trace's 31000

  // `layout`: the VWs (one rank each); `vw`: this rank's VW. Rank 0 logs the schedule.
  WspTurns(const Config& cfg, dist::Comm& world, const dist::Layout& layout, int vw);
  bool on() const { return on_; }
  // `first_step`: the step the loop starts at: 0, or a resumed run's checkpoint, a multiple of
  // checkpoint.every, where the order is cut (deterministic_turns); else an Error.
  void start_at(int64_t first_step);

  // Before the VW's next minibatch: waits for the token of the previous turn (another VW's).
  void begin();
  // The requested pull that gates the VW's next minibatch (WorkerClock::startable() is false): off,
  // blocks until the server allows it; on, it must be allowed already (internal error otherwise;
  // the client runs on this thread in deterministic mode).
  int64_t gated_pull(dist::ServerClient& client, std::vector<float>& out);
  // After the minibatch's push: hands the token to the rank of the next turn (another VW's).
  void end();

 private:
  bool on_ = false;
  dist::Comm* world_ = nullptr;
  int vw_ = 0;
  int64_t every_ = 0;         // checkpoint.every: where the order is cut
  std::vector<int> order_;    // the VW of each turn
  std::vector<int> rank_of_;  // each VW's rank
  std::vector<int64_t> mine_;  // this VW's turns, in order
  size_t next_ = 0;            // index into mine_ of the current / next turn
  int64_t first_turn_ = 0;     // the run's first turn (a resumed run starts at a cut of the order)
  bool in_turn_ = false;
};

}  // namespace baton
