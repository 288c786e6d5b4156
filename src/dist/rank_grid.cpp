// Rank grid (rank_grid.h): rank = tp_rank + tp * (dp_rank + dp * pp_rank). Each group is the set
// of ranks that differ only in that group's coordinate; make_process_groups builds one
// communicator per group with Comm::split, coloured by the other two coordinates.
#include "dist/rank_grid.h"

#include "core/error.h"

namespace baton::dist {
namespace {

void assert_valid(const GridShape& g) {
  BATON_ASSERT(g.tp >= 1 && g.dp >= 1 && g.pp >= 1, "grid shape tp {} dp {} pp {} must be >= 1",
               g.tp, g.dp, g.pp);
}

// Ranks of `rank`'s group along one axis: vary that coordinate over [0, extent).
template <typename Set>
std::vector<int> axis_ranks(const GridShape& g, int rank, int extent, Set set) {
  GridCoord c = grid_coord(g, rank);
  std::vector<int> out;
  out.reserve(extent);
  for (int i = 0; i < extent; ++i) {
    set(c, i);
    out.push_back(grid_rank(g, c));
  }
  return out;
}

}  // namespace

GridCoord grid_coord(const GridShape& g, int rank) {
  assert_valid(g);
  BATON_ASSERT(rank >= 0 && rank < g.world(), "rank {} outside a world of {}", rank, g.world());
  return GridCoord{.tp = rank % g.tp, .dp = (rank / g.tp) % g.dp, .pp = rank / (g.tp * g.dp)};
}

int grid_rank(const GridShape& g, const GridCoord& c) {
  assert_valid(g);
  BATON_ASSERT(c.tp >= 0 && c.tp < g.tp && c.dp >= 0 && c.dp < g.dp && c.pp >= 0 && c.pp < g.pp,
               "grid coordinate (tp {}, dp {}, pp {}) outside shape ({}, {}, {})", c.tp, c.dp,
               c.pp, g.tp, g.dp, g.pp);
  return c.tp + g.tp * (c.dp + g.dp * c.pp);
}

std::vector<int> tp_group_ranks(const GridShape& g, int rank) {
  return axis_ranks(g, rank, g.tp, [](GridCoord& c, int i) { c.tp = i; });
}
std::vector<int> dp_group_ranks(const GridShape& g, int rank) {
  return axis_ranks(g, rank, g.dp, [](GridCoord& c, int i) { c.dp = i; });
}
std::vector<int> pp_group_ranks(const GridShape& g, int rank) {
  return axis_ranks(g, rank, g.pp, [](GridCoord& c, int i) { c.pp = i; });
}

ProcessGroups make_process_groups(Comm& world, const GridShape& shape) {
  // Checked before any collective, with the same outcome on every rank, so a bad layout is an
  // error everywhere and never a rank waiting in a split the others skipped.
  BATON_REQUIRE(shape.tp >= 1 && shape.dp >= 1 && shape.pp >= 1,
                fmt::format("parallel layout tp {} x dp {} x pp {}: every factor must be >= 1",
                            shape.tp, shape.dp, shape.pp),
                "set parallel.tp and parallel.pp to positive integers");
  BATON_REQUIRE(world.size() == shape.world(),
                fmt::format("{} ranks were launched but the layout tp {} x dp {} x pp {} needs {}",
                            world.size(), shape.tp, shape.dp, shape.pp, shape.world()),
                fmt::format("launch {} ranks (mpirun -np {}), or change parallel.tp / parallel.pp "
                            "so that tp x pp divides the number of ranks",
                            shape.world(), shape.world()));
  ProcessGroups pg;
  pg.shape = shape;
  pg.coord = grid_coord(shape, world.rank());
  pg.world = &world;
  const GridCoord& c = pg.coord;
  // Colour = index of the two fixed coordinates; key = the varying one (so group rank == coord).
  pg.tp = world.split(c.dp + shape.dp * c.pp, c.tp);
  pg.dp = world.split(c.tp + shape.tp * c.pp, c.dp);
  pg.pp = world.split(c.tp + shape.tp * c.dp, c.pp);
  return pg;
}

}  // namespace baton::dist
