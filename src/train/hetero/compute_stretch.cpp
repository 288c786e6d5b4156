// ComputeStretch: see compute_stretch.h.
#include "train/hetero/compute_stretch.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <string_view>
#include <thread>

#include "core/error.h"
#include "core/rng.h"
#include "core/timer.h"

namespace baton {

ComputeStretch::ComputeStretch(double slowdown, double jitter, uint64_t seed, int rank, int span, int vw,
                               double probability)
    : slowdown_(slowdown), jitter_(jitter), probability_(probability), seed_(seed), rank_(rank), span_(span), vw_(vw) {
  BATON_REQUIRE(std::isfinite(slowdown) && slowdown >= 1,
                fmt::format("rank {}: slowdown {} is not a factor >= 1", rank, slowdown),
                "hetero.slowdown gives each rank a factor >= 1 (1 = the rank's own speed)");
  BATON_REQUIRE(std::isfinite(jitter) && jitter >= 0, fmt::format("rank {}: jitter {} is negative", rank, jitter),
                "hetero.jitter >= 0 (0 = off)");
  BATON_REQUIRE(span >= 1, fmt::format("rank {}: jitter span {} is not a count of minibatches >= 1", rank, span),
                "hetero.jitter_span >= 1 (1 = a new factor every minibatch)");
  BATON_REQUIRE(probability > 0 && probability <= 1,
                fmt::format("rank {}: jitter probability {} is not in (0, 1]", rank, probability),
                "hetero.jitter_probability is the share of episodes that straggle (1 = every episode)");
}

double ComputeStretch::factor(int64_t minibatch) const {
  if (jitter_ == 0) return slowdown_;
  const int64_t episode = (minibatch - 1) / span_ + 1;  // span 1: the minibatch itself
  // 53 random bits -> [0, 1) from a stream of its own apart from data and dropout, per rank or
  // (jitter_scope "vw") per VW: "compute_stretch[_vw]" for the factor, "..._straggles" for whether
  // the episode straggles at all.
  const auto draw = [&](std::string_view stream) {
    const uint64_t key = static_cast<uint64_t>(vw_ < 0 ? rank_ : vw_);
    const uint64_t h = mix({seed_, hash_string(stream), key, static_cast<uint64_t>(episode)});
    return static_cast<double>(h >> 11) * 0x1.0p-53;
  };
  if (probability_ < 1 && draw(vw_ < 0 ? "compute_stretch_straggles" : "compute_stretch_vw_straggles") >= probability_)
    return slowdown_;
  return slowdown_ * (1 + jitter_ * draw(vw_ < 0 ? "compute_stretch" : "compute_stretch_vw"));
}

double ComputeStretch::stretch(WorkTime t, int64_t minibatch) const {
  if (!active()) return 0;
  const double extra = factor(minibatch) * t.cpu - t.wall;
  if (!(extra > 0)) return 0;
  Timer slept;
  std::this_thread::sleep_for(std::chrono::duration<double>(extra));
  return slept.seconds();
}

}  // namespace baton
