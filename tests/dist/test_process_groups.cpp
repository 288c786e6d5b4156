// make_process_groups under mpirun (4 and 8 ranks): for every (tp, dp, pp) whose product is the
// world size, each group's communicator has exactly the members rank_grid's pure functions name,
// in the same order, and collectives on it stay inside the group. A mismatched layout is an
// error on every rank before any collective.
#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "dist/rank_grid.h"

namespace baton::dist {
namespace {

std::vector<GridShape> shapes_of(int world) {
  std::vector<GridShape> out;
  for (int tp = 1; tp <= world; ++tp)
    for (int dp = 1; dp <= world; ++dp)
      if (world % (tp * dp) == 0) out.push_back({.tp = tp, .dp = dp, .pp = world / (tp * dp)});
  return out;
}

// World ranks of the members of `group`, in group-rank order, gathered over the group itself.
std::vector<int> members(Comm& group, int world_rank) {
  std::vector<int32_t> all(group.size());
  int32_t mine = world_rank;
  group.all_gather(&mine, all.data(), 1, DType::I32);
  return {all.begin(), all.end()};
}

TEST(ProcessGroups, MatchTheRankGrid) {
  auto world = MpiRuntime::world();
  const int r = world->rank();
  for (const GridShape& s : shapes_of(world->size())) {
    SCOPED_TRACE(::testing::Message() << "tp " << s.tp << " dp " << s.dp << " pp " << s.pp);
    ProcessGroups pg = make_process_groups(*world, s);
    EXPECT_EQ(pg.world, world.get());
    EXPECT_EQ(pg.coord, grid_coord(s, r));
    ASSERT_TRUE(pg.tp && pg.dp && pg.pp);
    EXPECT_EQ(pg.tp->size(), s.tp);
    EXPECT_EQ(pg.dp->size(), s.dp);
    EXPECT_EQ(pg.pp->size(), s.pp);
    EXPECT_EQ(pg.tp->rank(), pg.coord.tp);
    EXPECT_EQ(pg.dp->rank(), pg.coord.dp);
    EXPECT_EQ(pg.pp->rank(), pg.coord.pp);
    EXPECT_EQ(members(*pg.tp, r), tp_group_ranks(s, r));
    EXPECT_EQ(members(*pg.dp, r), dp_group_ranks(s, r));
    EXPECT_EQ(members(*pg.pp, r), pp_group_ranks(s, r));
    // Reductions stay inside the group.
    double dp_sum = 0;
    for (int q : dp_group_ranks(s, r)) dp_sum += q;
    EXPECT_EQ(pg.dp->all_reduce_scalar(r), dp_sum);
  }
}

TEST(ProcessGroups, WrongWorldSizeIsAnErrorOnEveryRank) {
  auto world = MpiRuntime::world();
  const GridShape wrong{.tp = 3, .dp = 1, .pp = world->size()};
  try {
    make_process_groups(*world, wrong);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ranks were launched"), std::string::npos) << e.what();
    EXPECT_NE(e.hint().find("mpirun -np"), std::string::npos) << e.hint();
  }
  const GridShape zero{.tp = 0, .dp = 1, .pp = 1};
  EXPECT_THROW(make_process_groups(*world, zero), Error);
  world->barrier();  // every rank got here: nobody was left inside a split
}

}  // namespace
}  // namespace baton::dist
