// Rank grid pure functions (no MPI): rank <-> (tp, dp, pp) round trips, each axis's groups
// partition the world, tensor-parallel ranks are adjacent, and the layout is Megatron-LM's
// (its initialize_model_parallel example: 16 GPUs, tp 2, pp 4).
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <set>
#include <vector>

#include "core/error.h"
#include "dist/rank_grid.h"

namespace baton::dist {
namespace {

using Groups = std::vector<std::vector<int>>;
using GroupFn = std::function<std::vector<int>(const GridShape&, int)>;

std::vector<GridShape> many_shapes() {
  std::vector<GridShape> out;
  for (int tp = 1; tp <= 4; ++tp)
    for (int dp = 1; dp <= 4; ++dp)
      for (int pp = 1; pp <= 4; ++pp) out.push_back({tp, dp, pp});
  out.push_back({8, 3, 5});
  out.push_back({1, 64, 1});
  out.push_back({8, 16, 4});
  return out;
}

// The distinct groups of one axis over the whole world, in order of first appearance.
Groups all_groups(const GridShape& g, const GroupFn& fn) {
  Groups out;
  for (int r = 0; r < g.world(); ++r) {
    auto grp = fn(g, r);
    if (std::find(out.begin(), out.end(), grp) == out.end()) out.push_back(grp);
  }
  return out;
}

TEST(RankGrid, CoordRoundTrip) {
  for (const GridShape& g : many_shapes()) {
    for (int r = 0; r < g.world(); ++r) {
      const GridCoord c = grid_coord(g, r);
      EXPECT_GE(c.tp, 0);
      EXPECT_LT(c.tp, g.tp);
      EXPECT_GE(c.dp, 0);
      EXPECT_LT(c.dp, g.dp);
      EXPECT_GE(c.pp, 0);
      EXPECT_LT(c.pp, g.pp);
      EXPECT_EQ(grid_rank(g, c), r);
      EXPECT_EQ(r, c.tp + g.tp * (c.dp + g.dp * c.pp));  // the documented formula
    }
  }
}

TEST(RankGrid, GroupsPartitionTheWorld) {
  const std::pair<const char*, GroupFn> axes[] = {
      {"tp", tp_group_ranks}, {"dp", dp_group_ranks}, {"pp", pp_group_ranks}};
  for (const GridShape& g : many_shapes()) {
    const int extent[] = {g.tp, g.dp, g.pp};
    for (int a = 0; a < 3; ++a) {
      SCOPED_TRACE(::testing::Message() << axes[a].first << " of " << g.tp << "x" << g.dp << "x"
                                        << g.pp);
      const Groups groups = all_groups(g, axes[a].second);
      EXPECT_EQ(static_cast<int>(groups.size()), g.world() / extent[a]);
      std::multiset<int> seen;
      for (const auto& grp : groups) {
        EXPECT_EQ(static_cast<int>(grp.size()), extent[a]);
        seen.insert(grp.begin(), grp.end());
        // Group rank i is the member whose coordinate on this axis is i; others are equal.
        for (int i = 0; i < static_cast<int>(grp.size()); ++i) {
          const GridCoord c = grid_coord(g, grp[i]), c0 = grid_coord(g, grp[0]);
          const int on_axis[] = {c.tp, c.dp, c.pp};
          EXPECT_EQ(on_axis[a], i);
          EXPECT_EQ(a == 0 || c.tp == c0.tp, true);
          EXPECT_EQ(a == 1 || c.dp == c0.dp, true);
          EXPECT_EQ(a == 2 || c.pp == c0.pp, true);
        }
      }
      // Every rank in exactly one group, and in the group its own query returns.
      EXPECT_EQ(static_cast<int>(seen.size()), g.world());
      for (int r = 0; r < g.world(); ++r) {
        EXPECT_EQ(seen.count(r), 1u);
        const auto mine = axes[a].second(g, r);
        EXPECT_NE(std::find(mine.begin(), mine.end(), r), mine.end());
      }
    }
  }
}

TEST(RankGrid, TensorParallelRanksAreAdjacent) {
  for (const GridShape& g : many_shapes())
    for (int r = 0; r < g.world(); ++r) {
      const auto grp = tp_group_ranks(g, r);
      for (size_t i = 1; i < grp.size(); ++i) EXPECT_EQ(grp[i], grp[i - 1] + 1);
      EXPECT_EQ(grp.front() % g.tp, 0);
    }
}

// Megatron-LM, megatron/core/parallel_state.py, initialize_model_parallel's docstring.
TEST(RankGrid, MatchesMegatronExample) {
  const GridShape g{.tp = 2, .dp = 2, .pp = 4};
  ASSERT_EQ(g.world(), 16);
  EXPECT_EQ(all_groups(g, tp_group_ranks),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(all_groups(g, dp_group_ranks),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(all_groups(g, pp_group_ranks),
            (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  EXPECT_EQ(grid_coord(g, 13), (GridCoord{.tp = 1, .dp = 0, .pp = 3}));
}

TEST(RankGrid, DegenerateShapes) {
  const GridShape one{};
  EXPECT_EQ(one.world(), 1);
  EXPECT_EQ(grid_coord(one, 0), GridCoord{});
  EXPECT_EQ(tp_group_ranks(one, 0), std::vector<int>{0});
  const GridShape dp_only{.tp = 1, .dp = 4, .pp = 1};
  EXPECT_EQ(dp_group_ranks(dp_only, 2), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(tp_group_ranks(dp_only, 2), std::vector<int>{2});
}

TEST(RankGrid, OutOfRangeIsAnError) {
  const GridShape g{.tp = 2, .dp = 2, .pp = 1};
  EXPECT_THROW(grid_coord(g, 4), Error);
  EXPECT_THROW(grid_coord(g, -1), Error);
  EXPECT_THROW(grid_rank(g, GridCoord{.tp = 2}), Error);
  EXPECT_THROW(grid_coord(GridShape{.tp = 0}, 0), Error);
}

}  // namespace
}  // namespace baton::dist
