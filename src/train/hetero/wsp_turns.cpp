// WSP's deterministic mode: the seeded order of turns and the token that serializes them (see
// wsp_turns.h).
#include "train/hetero/wsp_turns.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include <fmt/ranges.h>

#include "config/device_emulation.h"
#include "config/virtual_workers.h"
#include "core/error.h"
#include "core/log.h"
#include "dist/server_client.h"
#include "wsp/interleaving.h"

namespace baton {

std::vector<int> deterministic_turns(const Config& cfg, const dist::Layout& layout) {
  const int n = layout.num_groups();
  const std::vector<RankEmulation> emu = rank_emulation(cfg, layout.world());
  std::vector<double> speed;
  for (int v = 0; v < n; ++v) {
    BATON_ASSERT(layout.pipeline(v).ranks() == 1, "deterministic mode with a virtual worker of {} ranks",
                 layout.pipeline(v).ranks());
    speed.push_back(1.0 / emu[static_cast<size_t>(layout.rank_of(v, 0, 0))].slowdown);
  }
  // One interleaving per segment between checkpoints (every VW meets at a checkpoint: the order
  // is cut there), each with its own seed; one segment without checkpoints.
  const int64_t segment = cfg.checkpoint.every > 0 ? cfg.checkpoint.every : cfg.train.steps;
  std::vector<int> order;
  for (int64_t first = 0, k = 0; first < cfg.train.steps; first += segment, ++k) {
    const int64_t steps = std::min(segment, cfg.train.steps - first);
    wsp::InterleavingSpec spec{.params = {.num_vw = n, .nm = cfg.hetero.nm, .staleness = cfg.hetero.staleness},
                               .waves = static_cast<int>(steps / cfg.hetero.nm),
                               .speed = speed,
                               .seed = cfg.train.seed + static_cast<uint64_t>(k) * 0x9E3779B97F4A7C15ull};
    const std::vector<int> part = wsp::interleave(spec).order;
    order.insert(order.end(), part.begin(), part.end());
  }
  for (int v = 0; v < n; ++v)
    BATON_ASSERT(std::count(order.begin(), order.end(), v) == cfg.train.steps,
                 "deterministic mode: VW {} has {} turns, not train.steps = {}", v,
                 std::count(order.begin(), order.end(), v), cfg.train.steps);
  return order;
}

WspTurns::WspTurns(const Config& cfg, dist::Comm& world, const dist::Layout& layout, int vw)
    : on_(cfg.hetero.deterministic), world_(&world), vw_(vw), every_(cfg.checkpoint.every) {
  if (!on_) return;
  order_ = deterministic_turns(cfg, layout);
  for (int v = 0; v < layout.num_groups(); ++v) rank_of_.push_back(layout.rank_of(v, 0, 0));
  if (world.rank() == 0) {
    const size_t shown = std::min<size_t>(order_.size(), 36);
    log::info("deterministic mode (hetero.deterministic): {} turns of one minibatch each, serialized in "
              "wsp::interleave's order (seed {}, relative speeds 1 / slowdown); the VWs of the first {}: {}{}",
              order_.size(), cfg.train.seed, shown,
              fmt::join(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(shown), " "),
              shown < order_.size() ? " ..." : "");
  }
}

void WspTurns::start_at(int64_t first_step) {
  if (!on_) return;
  // A resumed run replays the order from the cut at its checkpoint: the turns before it are every
  // VW's minibatches 1 … first_step.
  BATON_REQUIRE(first_step == 0 || (every_ > 0 && first_step % every_ == 0),
                fmt::format("hetero.deterministic = true resumes at a multiple of checkpoint.every only (the order of "
                            "turns is cut there), not at step {}", first_step),
                "resume with the checkpoint.every the run was written with, or start the deterministic run in a new "
                "run.dir (checkpoint.resume = \"never\")");
  const size_t skipped = static_cast<size_t>(first_step) * rank_of_.size();
  first_turn_ = static_cast<int64_t>(skipped);
  mine_.clear();
  next_ = 0;
  for (size_t i = skipped; i < order_.size(); ++i)
    if (order_[i] == vw_) mine_.push_back(static_cast<int64_t>(i));
}

void WspTurns::begin() {
  if (!on_) return;
  BATON_ASSERT(!in_turn_ && next_ < mine_.size(), "deterministic mode: VW {} starts turn {} of its {}", vw_, next_,
               mine_.size());
  const int64_t i = mine_[next_];
  in_turn_ = true;
  if (i == first_turn_ || order_[static_cast<size_t>(i - 1)] == vw_) return;
  const int from = rank_of_[static_cast<size_t>(order_[static_cast<size_t>(i - 1)])];
  int64_t token = -1;
  dist::RequestPtr r = world_->recv(&token, 1, DType::I64, from, kTurnTag);
  {
    dist::BlockedTimer blocked("the deterministic mode's turn token");
    // Poll with sleeps: a blocking MPI receive would spin on a core the computing rank needs.
    for (int attempt = 0; !r->test(); ++attempt)
      std::this_thread::sleep_for(std::chrono::microseconds(std::min(1000, 50 << std::min(attempt, 5))));
  }
  r->wait();
  BATON_ASSERT(token == i - 1, "deterministic mode: VW {} (turn {}) got the token of turn {} from rank {}", vw_, i,
               token, from);
}

int64_t WspTurns::gated_pull(dist::ServerClient& client, std::vector<float>& out) {
  if (!on_) return client.wait_pull(out);
  BATON_ASSERT(in_turn_ && !client.background(), "deterministic mode: VW {} pulls outside its turn or on a thread",
               vw_);
  const std::optional<int64_t> c = client.take_pull(out);
  BATON_ASSERT(c.has_value(),
               "deterministic mode: turn {} (VW {}): the pull that gates its minibatch {} is not allowed by the "
               "turns before it (the schedule and the VW's clock disagree)",
               mine_[next_], vw_, next_ + 1);
  return *c;
}

void WspTurns::end() {
  if (!on_) return;
  BATON_ASSERT(in_turn_, "deterministic mode: VW {} ends a turn it did not begin", vw_);
  const int64_t i = mine_[next_];
  in_turn_ = false;
  ++next_;
  if (static_cast<size_t>(i + 1) >= order_.size() || order_[static_cast<size_t>(i + 1)] == vw_) return;
  const int64_t token = i;
  world_->send(&token, 1, DType::I64, rank_of_[static_cast<size_t>(order_[static_cast<size_t>(i + 1)])], kTurnTag)
      ->wait();
}

}  // namespace baton
