// Rank grid for homogeneous layouts (DESIGN §3): world = tp x dp x pp, rank order tp fastest,
// then dp, then pp, so tensor-parallel ranks are adjacent (share a node) — Megatron's order.
//   rank = tp_rank + tp * (dp_rank + dp * pp_rank)
// Pure functions; the communicators for each group are built from them (make_process_groups).
#pragma once
#include <memory>
#include <vector>

#include "dist/comm.h"

namespace baton::dist {

struct GridShape {
  int tp = 1, dp = 1, pp = 1;
  int world() const { return tp * dp * pp; }
};

struct GridCoord {
  int tp = 0, dp = 0, pp = 0;
  bool operator==(const GridCoord&) const = default;
};

GridCoord grid_coord(const GridShape& g, int rank);
int grid_rank(const GridShape& g, const GridCoord& c);
// World ranks of the groups `rank` belongs to, in group-rank order.
std::vector<int> tp_group_ranks(const GridShape& g, int rank);
std::vector<int> dp_group_ranks(const GridShape& g, int rank);
std::vector<int> pp_group_ranks(const GridShape& g, int rank);

// This rank's communicators. `world` must outlive the groups only for MPI bootstrap; each group
// owns its communicator.
struct ProcessGroups {
  GridShape shape;
  GridCoord coord;
  Comm* world = nullptr;
  std::unique_ptr<Comm> tp, dp, pp;
};

// Collective over `world`: splits it into the tp, dp and pp groups of `shape`.
ProcessGroups make_process_groups(Comm& world, const GridShape& shape);

}  // namespace baton::dist
