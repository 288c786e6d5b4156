// make_process_groups under mpirun (4 and 8 ranks): for every homogeneous (tp, dp, pp) layout of
// the world, for replicated stages and for groups with pipelines of their own, each communicator
// has exactly the members the Layout names, in the same order, and collectives on it stay inside
// the group. A layout for another world size is an error on every rank before any collective.
#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "dist/process_groups.h"

namespace baton::dist {
namespace {

PipelineSpec even_pipe(int pp, std::vector<int> replicas = {}) {
  PipelineSpec p{.pp = pp, .replicas = std::move(replicas)};
  for (int s = 0; s < pp; ++s) p.stages.push_back({s * 2, s * 2 + 2});
  return p;
}

std::vector<Layout> layouts_of(int world) {
  std::vector<Layout> out;
  for (int tp = 1; tp <= world; ++tp)
    for (int dp = 1; dp <= world; ++dp)
      if (world % (tp * dp) == 0) out.push_back(Layout::grid(tp, dp, even_pipe(world / (tp * dp))));
  // Groups of their own over 6 layers: one stage, and three uneven ones (world = tp · 4).
  const PipelineSpec one{.pp = 1, .stages = {{0, 6}}}, three{.pp = 3, .stages = {{0, 1}, {1, 4}, {4, 6}}};
  if (world == 4) {
    out.push_back(Layout::grid(1, 1, even_pipe(3, {1, 2, 1})));
    out.push_back(Layout::groups(1, {one, three}));
  }
  if (world == 8) {
    out.push_back(Layout::grid(2, 1, even_pipe(2, {1, 3})));
    out.push_back(Layout::groups(2, {one, three}));
  }
  return out;
}

// World ranks of the members of `group`, in group-rank order, gathered over the group itself.
std::vector<int> members(Comm& group, int world_rank) {
  std::vector<int32_t> all(group.size());
  int32_t mine = world_rank;
  group.all_gather(&mine, all.data(), 1, DType::I32);
  return {all.begin(), all.end()};
}

void expect_group(Comm* c, const std::vector<int>& want, int r, const char* what) {
  SCOPED_TRACE(what);
  if (want.empty()) {
    EXPECT_EQ(c, nullptr);
    return;
  }
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(members(*c, r), want);
  // Reductions stay inside the group.
  double sum = 0;
  for (int q : want) sum += q;
  EXPECT_EQ(c->all_reduce_scalar(r), sum);
}

TEST(ProcessGroups, MatchTheLayout) {
  auto world = MpiRuntime::world();
  const int r = world->rank();
  for (const Layout& l : layouts_of(world->size())) {
    SCOPED_TRACE(l.describe());
    if (l.world() != world->size()) continue;
    const std::vector<int> tied = {0, l.pipeline(0).num_layers() - 1};
    ProcessGroups pg = make_process_groups(*world, l, tied);
    EXPECT_EQ(pg.world, world.get());
    expect_group(pg.tp.get(), l.tp_ranks(r), r, "tp");
    expect_group(pg.dp.get(), l.dp_ranks(r), r, "dp");
    expect_group(pg.pp.get(), l.pipe_ranks(r), r, "pp");
    expect_group(pg.replica.get(), l.replica_ranks(r), r, "replica");
    expect_group(pg.tied.get(), l.tied_ranks(r, tied), r, "tied");
    expect_group(pg.group.get(), l.group_ranks(r), r, "group");
    EXPECT_EQ(pg.tp->rank(), l.place(r).tp_rank);
    EXPECT_EQ(pg.pp->rank(), l.place(r).pipe_rank);
  }
}

TEST(ProcessGroups, WrongWorldSizeIsAnErrorOnEveryRank) {
  auto world = MpiRuntime::world();
  const Layout wrong = Layout::grid(3, 1, even_pipe(world->size()));
  try {
    make_process_groups(*world, wrong);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ranks were launched"), std::string::npos) << e.what();
    EXPECT_NE(e.hint().find("mpirun -np"), std::string::npos) << e.hint();
  }
  world->barrier();  // every rank got here: nobody was left inside a split
}

}  // namespace
}  // namespace baton::dist
