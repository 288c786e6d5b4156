// WSP arithmetic (see wave.h).
#include "wsp/wave.h"

#include "core/error.h"

namespace baton::wsp {

void check_params(const WspParams& p) {
  BATON_REQUIRE(p.num_vw >= 1, fmt::format("WSP needs at least one virtual worker, got {}", p.num_vw),
                "list the virtual workers in [hetero] virtual_workers");
  BATON_REQUIRE(p.nm >= 1, fmt::format("WSP needs Nm >= 1 minibatches per wave, got {}", p.nm),
                "Nm = 1 is naive model parallelism; Nm is at most the VW's Max_m (HetPipe §4)");
  BATON_REQUIRE(p.staleness >= 0, fmt::format("WSP clock distance D must be >= 0, got {}", p.staleness),
                "set hetero.staleness to 0 (BSP-like) or more");
}

std::optional<int> gating_clock(int minibatch, int nm, int staleness) {
  if (minibatch % nm != 0) return std::nullopt;  // only the last minibatch of a wave
  const int clock = minibatch / nm - 2;
  if (clock < 0 || !pulls_at_end_of(clock, staleness)) return std::nullopt;
  return clock;
}

}  // namespace baton::wsp
