// WSP's deterministic mode: the seeded order of the leaders' hooks and the token that serializes
// them (see wsp_turns.h).
#include "train/hetero/wsp_turns.h"

#include <algorithm>

#include <fmt/ranges.h>

#include "config/device_emulation.h"
#include "core/error.h"
#include "core/log.h"
#include "core/rng.h"
#include "dist/server_client.h"
#include "train/hetero/wsp_stage.h"
#include "wsp/worker_clock.h"

namespace baton {
namespace {

std::string to_string(const Turn& t) {
  return fmt::format("{}{}{}", t.vw, t.hook == Turn::FORWARD ? 'F' : 'U', t.minibatch);
}

}  // namespace

std::vector<Turn> deterministic_turns(const Config& cfg, const dist::Layout& layout) {
  const int n = layout.num_groups(), nm = cfg.hetero.nm;
  const wsp::WspParams params{.num_vw = n, .nm = nm, .staleness = cfg.hetero.staleness};
  const std::vector<RankEmulation> emu = rank_emulation(cfg, layout.world());
  std::vector<double> speed;
  std::vector<int64_t> in_flight;  // L: minibatches in flight on the VW's first stage
  for (int v = 0; v < n; ++v) {
    double slowest = 1.0;
    for (int r = 0; r < layout.pipeline(v).ranks(); ++r)
      slowest = std::max(slowest, emu[static_cast<size_t>(layout.rank_of(v, r, 0))].slowdown);
    speed.push_back(1.0 / slowest);
    in_flight.push_back(layout.pipeline(v).pp > 1 ? nm : 1);
  }
  std::vector<wsp::WorkerClock> clocks;
  for (int v = 0; v < n; ++v) clocks.emplace_back(v, params, static_cast<int>(cfg.train.steps));
  std::vector<int> pushed(static_cast<size_t>(n), 0);
  int c_global = 0;

  const int64_t steps = cfg.train.steps;
  const int64_t segment = cfg.checkpoint.every > 0 ? cfg.checkpoint.every : steps;
  std::vector<Turn> order;
  for (int64_t a = 0, k = 0; a < steps; a += segment, ++k) {
    const int64_t e = std::min(a + segment, steps);
    BATON_ASSERT(e == steps || e % nm == 0, "deterministic mode: a checkpoint at step {}, not a wave's end", e);
    std::vector<int64_t> f(static_cast<size_t>(n), a + 1), u(static_cast<size_t>(n), a + 1);  // next F, next U
    const auto next = [&](int v) -> std::optional<Turn> {
      const size_t i = static_cast<size_t>(v);
      if (f[i] <= e && f[i] - in_flight[i] <= u[i] - 1) return Turn{v, Turn::FORWARD, f[i]};
      if (u[i] <= e) return Turn{v, Turn::UPDATE, u[i]};
      return std::nullopt;
    };
    const auto runnable = [&](int v) {
      const std::optional<Turn> t = next(v);
      if (!t) return false;
      const std::optional<int> needs = clocks[static_cast<size_t>(v)].waiting_for();
      return t->hook == Turn::UPDATE || !needs || c_global >= *needs || clocks[static_cast<size_t>(v)].startable();
    };
    Rng rng(mix({cfg.train.seed, static_cast<uint64_t>(k), 0x575350}));  // "WSP"
    for (;;) {
      double total = 0;
      int last = -1;
      for (int v = 0; v < n; ++v)
        if (runnable(v)) total += speed[static_cast<size_t>(v)], last = v;
      if (last < 0) break;
      double x = static_cast<double>(rng.uniform()) * total;
      int v = last;
      for (int w = 0; w < n; ++w)
        if (runnable(w) && (x -= speed[static_cast<size_t>(w)]) < 0) {
          v = w;
          break;
        }
      const Turn t = *next(v);
      wsp::WorkerClock& clock = clocks[static_cast<size_t>(v)];
      if (t.hook == Turn::FORWARD) {
        if (const std::optional<int> needs = clock.waiting_for(); needs && c_global >= *needs)
          clock.complete_pull(pulled_version(n, c_global, v, pushed[static_cast<size_t>(v)], nm));
        BATON_ASSERT(clock.startable() && *clock.startable() == t.minibatch,
                     "deterministic mode: VW {}'s forward of minibatch {} cannot start", v, t.minibatch);
        clock.start();
        ++f[static_cast<size_t>(v)];
      } else {
        if (clock.finish()) {
          ++pushed[static_cast<size_t>(v)];
          c_global = *std::min_element(pushed.begin(), pushed.end());
        }
        ++u[static_cast<size_t>(v)];
      }
      order.push_back(t);
    }
    for (int v = 0; v < n; ++v)
      BATON_ASSERT(!next(v), "deterministic mode: VW {} is stuck at {} (every VW waits for the server)", v,
                   to_string(*next(v)));
    // The checkpoint's meeting: every VW takes the pull of every pushed wave.
    for (int v = 0; v < n; ++v)
      if (clocks[static_cast<size_t>(v)].waiting_for())
        clocks[static_cast<size_t>(v)].complete_pull(pulled_version(n, c_global, v, pushed[static_cast<size_t>(v)], nm));
  }
  BATON_ASSERT(order.size() == static_cast<size_t>(2 * steps * n), "deterministic mode: {} turns for {} VWs x {} steps",
               order.size(), n, steps);
  return order;
}

WspTurns::WspTurns(const Config& cfg, dist::Comm& world, const dist::Layout& layout, int vw)
    : on_(cfg.hetero.deterministic), world_(&world), vw_(vw), every_(cfg.checkpoint.every) {
  if (!on_) return;
  order_ = deterministic_turns(cfg, layout);
  for (int v = 0; v < layout.num_groups(); ++v) rank_of_.push_back(layout.rank_of(v, 0, 0));
  if (world.rank() == 0) {
    const size_t shown = std::min<size_t>(order_.size(), 40);
    std::vector<std::string> first;
    for (size_t i = 0; i < shown; ++i) first.push_back(to_string(order_[i]));
    log::info("deterministic mode (hetero.deterministic): {} turns, each a hook of a VW's first stage (F k: before "
              "the forward of minibatch k, U k: after its update), serialized in a seeded order (seed {}, relative "
              "speeds 1 / slowdown); the first {}: {}{}",
              order_.size(), cfg.train.seed, shown, fmt::join(first, " "), shown < order_.size() ? " ..." : "");
  }
}

void WspTurns::start_at(int64_t first_step) {
  if (!on_) return;
  BATON_REQUIRE(first_step == 0 || (every_ > 0 && first_step % every_ == 0),
                fmt::format("hetero.deterministic = true resumes at a multiple of checkpoint.every only (the order of "
                            "turns is cut there), not at step {}", first_step),
                "resume with the checkpoint.every the run was written with, or start the deterministic run in a new "
                "run.dir (checkpoint.resume = \"never\")");
  // The turns before the cut are every VW's hooks of minibatches 1 … first_step.
  first_turn_ = 2 * first_step * static_cast<int64_t>(rank_of_.size());
  mine_.clear();
  next_ = 0;
  for (size_t i = static_cast<size_t>(first_turn_); i < order_.size(); ++i)
    if (order_[i].vw == vw_) mine_.push_back(static_cast<int64_t>(i));
}

void WspTurns::begin(Turn::Hook hook, int64_t minibatch) {
  if (!on_) return;
  BATON_ASSERT(!in_turn_ && next_ < mine_.size(), "deterministic mode: VW {} starts turn {} of its {}", vw_, next_,
               mine_.size());
  const int64_t i = mine_[next_];
  const Turn& t = order_[static_cast<size_t>(i)];
  BATON_ASSERT(t.hook == hook && t.minibatch == minibatch,
               "deterministic mode: VW {}'s first stage calls {} where its turn {} is {} (the pipeline program's "
               "hook order and the order of turns disagree)",
               vw_, to_string(Turn{vw_, hook, minibatch}), i, to_string(t));
  in_turn_ = true;
  current_ = i;
  if (i == first_turn_ || order_[static_cast<size_t>(i - 1)].vw == vw_) return;
  const int from = rank_of_[static_cast<size_t>(order_[static_cast<size_t>(i - 1)].vw)];
  int64_t token = -1;
  dist::RequestPtr r = world_->recv(&token, 1, DType::I64, from, kTurnTag);
  {
    dist::BlockedTimer blocked("the deterministic mode's turn token");
    // Poll with sleeps: a blocking MPI receive would spin on a core a computing rank needs.
    for (int attempt = 0; !r->test(); ++attempt)
      dist::sleep_backoff(attempt, 50, 1000);
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
               "deterministic mode: turn {} ({}): the pull that gates it is not allowed by the turns before it (the "
               "order and the VW's clock disagree)",
               current_, to_string(order_[static_cast<size_t>(current_)]));
  return *c;
}

void WspTurns::end() {
  if (!on_) return;
  BATON_ASSERT(in_turn_, "deterministic mode: VW {} ends a turn it did not begin", vw_);
  const int64_t i = mine_[next_];
  in_turn_ = false;
  ++next_;
  if (static_cast<size_t>(i + 1) >= order_.size() || order_[static_cast<size_t>(i + 1)].vw == vw_) return;
  const int64_t token = i;
  world_->send(&token, 1, DType::I64, rank_of_[static_cast<size_t>(order_[static_cast<size_t>(i + 1)].vw)], kTurnTag)
      ->wait();
}

}  // namespace baton
