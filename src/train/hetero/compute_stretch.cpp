// ComputeStretch: see compute_stretch.h.
#include "train/hetero/compute_stretch.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "core/error.h"
#include "core/rng.h"
#include "core/timer.h"

namespace baton {

ComputeStretch::ComputeStretch(double slowdown, double jitter, uint64_t seed, int rank, int span, int vw)
    : slowdown_(slowdown), jitter_(jitter), seed_(seed), rank_(rank), span_(span), vw_(vw) {
  BATON_REQUIRE(std::isfinite(slowdown) && slowdown >= 1,
                fmt::format("rank {}: slowdown {} is not a factor >= 1", rank, slowdown),
                "hetero.slowdown gives each rank a factor >= 1 (1 = the rank's own speed)");
  BATON_REQUIRE(std::isfinite(jitter) && jitter >= 0, fmt::format("rank {}: jitter {} is negative", rank, jitter),
                "hetero.jitter >= 0 (0 = off)");
  BATON_REQUIRE(span >= 1, fmt::format("rank {}: jitter span {} is not a count of minibatches >= 1", rank, span),
                "hetero.jitter_span >= 1 (1 = a new factor every minibatch)");
}

double ComputeStretch::factor(int64_t minibatch) const {
  if (jitter_ == 0) return slowdown_;
  const int64_t episode = (minibatch - 1) / span_ + 1;  // span 1: the minibatch itself
  // 53 random bits -> u in [0, 1); a stream of its own ("stretch") apart from data and dropout, per
  // rank or (jitter_scope "vw") per VW.
  const uint64_t h = vw_ < 0 ? mix({seed_, hash_string("compute_stretch"), static_cast<uint64_t>(rank_),
                                    static_cast<uint64_t>(episode)})
                             : mix({seed_, hash_string("compute_stretch_vw"), static_cast<uint64_t>(vw_),
                                    static_cast<uint64_t>(episode)});
  const double u = static_cast<double>(h >> 11) * 0x1.0p-53;
  return slowdown_ * (1 + jitter_ * u);
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
