// Layout (dist/layout.h), pure (no MPI): every rank is placed exactly once; the homogeneous grid is
// Megatron's rank order (its initialize_model_parallel example: 16 GPUs, tp 2, pp 4); each kind of
// group partitions the world and holds the ranks its definition says; replicated stages (1F1B-RR)
// and groups with their own stage counts and boundaries (HetPipe's virtual workers) are placed and
// grouped consistently; bad pipelines are errors with a hint.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <set>
#include <vector>

#include "core/error.h"
#include "dist/layout.h"

namespace baton::dist {
namespace {

using Groups = std::vector<std::vector<int>>;
using GroupFn = std::function<std::vector<int>(const Layout&, int)>;

// An even split of `layers` global layers into `stages` model stages (a stand-in for a model's).
std::vector<LayerRange> even(int layers, int stages) {
  std::vector<LayerRange> out;
  for (int s = 0; s < stages; ++s) out.push_back({s * layers / stages, (s + 1) * layers / stages});
  return out;
}

PipelineSpec pipe(int pp, int vp = 1, std::vector<int> replicas = {}) {
  return PipelineSpec{.pp = pp, .vp = vp, .stages = even(24, pp * vp), .replicas = std::move(replicas)};
}

// The distinct groups of one kind over the whole world, in order of first appearance.
Groups all_groups(const Layout& l, const GroupFn& fn) {
  Groups out;
  for (int r = 0; r < l.world(); ++r) {
    auto grp = fn(l, r);
    if (std::find(out.begin(), out.end(), grp) == out.end()) out.push_back(grp);
  }
  return out;
}

// Every rank in exactly one group of the kind, and in the group its own query returns.
void expect_partition(const Layout& l, const GroupFn& fn, const char* what) {
  SCOPED_TRACE(what);
  std::multiset<int> seen;
  for (const auto& g : all_groups(l, fn)) seen.insert(g.begin(), g.end());
  EXPECT_EQ(static_cast<int>(seen.size()), l.world());
  for (int r = 0; r < l.world(); ++r) {
    EXPECT_EQ(seen.count(r), 1u) << "rank " << r;
    const auto mine = fn(l, r);
    EXPECT_NE(std::find(mine.begin(), mine.end(), r), mine.end());
  }
}

const std::pair<const char*, GroupFn> kGroupKinds[] = {
    {"tp", [](const Layout& l, int r) { return l.tp_ranks(r); }},
    {"pipe", [](const Layout& l, int r) { return l.pipe_ranks(r); }},
    {"dp", [](const Layout& l, int r) { return l.dp_ranks(r); }},
    {"replica", [](const Layout& l, int r) { return l.replica_ranks(r); }},
    {"group", [](const Layout& l, int r) { return l.group_ranks(r); }},
};

std::vector<Layout> many_layouts() {
  std::vector<Layout> out;
  for (int tp = 1; tp <= 4; ++tp)
    for (int dp = 1; dp <= 3; ++dp)
      for (int pp = 1; pp <= 4; ++pp) out.push_back(Layout::grid(tp, dp, pipe(pp)));
  out.push_back(Layout::grid(2, 2, pipe(2, 2)));
  out.push_back(Layout::grid(1, 1, pipe(4, 1, {2, 1, 1, 2})));
  out.push_back(Layout::grid(1, 2, pipe(2, 1, {3, 1})));
  out.push_back(Layout::groups(2, {pipe(2), pipe(3), PipelineSpec{.pp = 1, .stages = {{0, 24}}}}));
  return out;
}

TEST(Layout, EveryRankPlacedOnceAndGroupsPartitionTheWorld) {
  for (const Layout& l : many_layouts()) {
    SCOPED_TRACE(l.describe());
    int expected = 0;
    for (int g = 0; g < l.num_groups(); ++g) expected += l.tp() * l.pipeline(g).ranks();
    ASSERT_EQ(l.world(), expected);
    for (int r = 0; r < l.world(); ++r) {
      const RankPlace& p = l.place(r);
      EXPECT_EQ(l.rank_of(p.group, p.pipe_rank, p.tp_rank), r);
      EXPECT_EQ(l.pipe_rank_of(p.group, p.stage, p.replica), p.pipe_rank);
      const PipelineSpec& pl = l.pipeline(p.group);
      ASSERT_EQ(static_cast<int>(p.chunks.size()), pl.vp);
      for (int c = 0; c < pl.vp; ++c) {
        EXPECT_EQ(p.model_stages[c], p.stage + c * pl.pp);  // PTD-P: chunk c is stage c·pp + r
        EXPECT_EQ(p.chunks[c], pl.stages[p.model_stages[c]]);
      }
    }
    for (const auto& [name, fn] : kGroupKinds) expect_partition(l, fn, name);
    // Group members share what defines the group; their group ranks follow their coordinate.
    for (int r = 0; r < l.world(); ++r) {
      const RankPlace& me = l.place(r);
      const auto tp = l.tp_ranks(r);
      for (int i = 0; i < static_cast<int>(tp.size()); ++i) {
        EXPECT_EQ(l.place(tp[i]).tp_rank, i);
        EXPECT_EQ(l.place(tp[i]).pipe_rank, me.pipe_rank);
      }
      const auto pipe_ranks = l.pipe_ranks(r);
      for (int i = 0; i < static_cast<int>(pipe_ranks.size()); ++i) {
        EXPECT_EQ(l.place(pipe_ranks[i]).pipe_rank, i);
        EXPECT_EQ(l.place(pipe_ranks[i]).group, me.group);
      }
      for (int q : l.replica_ranks(r)) EXPECT_EQ(l.place(q).stage, me.stage);
    }
  }
}

// In the homogeneous grid tensor-parallel ranks are adjacent and rank = tp + tp·(dp + dp·pipe).
TEST(Layout, GridIsMegatronsRankOrder) {
  for (int tp : {1, 2, 4})
    for (int dp : {1, 3})
      for (int pp : {1, 2, 5}) {
        const Layout l = Layout::grid(tp, dp, pipe(pp));
        EXPECT_TRUE(l.homogeneous());
        EXPECT_EQ(l.dp(), dp);
        for (int r = 0; r < l.world(); ++r) {
          const RankPlace& p = l.place(r);
          EXPECT_EQ(r, p.tp_rank + tp * (p.group + dp * p.pipe_rank));
          const auto grp = l.tp_ranks(r);
          for (size_t i = 1; i < grp.size(); ++i) EXPECT_EQ(grp[i], grp[i - 1] + 1);
        }
      }
}

// Megatron-LM, megatron/core/parallel_state.py, initialize_model_parallel's docstring.
TEST(Layout, MatchesMegatronExample) {
  const Layout l = Layout::grid(2, 2, pipe(4));
  ASSERT_EQ(l.world(), 16);
  EXPECT_EQ(all_groups(l, kGroupKinds[0].second),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(all_groups(l, kGroupKinds[2].second),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(all_groups(l, kGroupKinds[1].second),
            (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  EXPECT_EQ(l.place(13).tp_rank, 1);
  EXPECT_EQ(l.place(13).group, 0);
  EXPECT_EQ(l.place(13).stage, 3);
}

// Replicated stages (1F1B-RR): stage s on replicas[s] consecutive pipeline ranks; the tied group
// pairs replica j of the first stage with replica j of the last.
TEST(Layout, ReplicatedStages) {
  const Layout l = Layout::grid(1, 1, pipe(4, 1, {2, 1, 1, 2}));
  ASSERT_EQ(l.world(), 6);
  const int stage_of[] = {0, 0, 1, 2, 3, 3}, replica_of[] = {0, 1, 0, 0, 0, 1};
  for (int r = 0; r < 6; ++r) {
    EXPECT_EQ(l.place(r).stage, stage_of[r]);
    EXPECT_EQ(l.place(r).replica, replica_of[r]);
  }
  EXPECT_EQ(l.replica_ranks(1), (std::vector<int>{0, 1}));
  EXPECT_EQ(l.replica_ranks(2), (std::vector<int>{2}));
  const std::vector<int> tied = {0, 23};  // the first and the last global layer
  EXPECT_EQ(l.tied_ranks(0, tied), (std::vector<int>{0, 4}));
  EXPECT_EQ(l.tied_ranks(5, tied), (std::vector<int>{1, 5}));
  EXPECT_TRUE(l.tied_ranks(2, tied).empty());  // holds neither
  // One stage holding both: nobody to share with.
  EXPECT_TRUE(Layout::grid(1, 1, pipe(1)).tied_ranks(0, tied).empty());
  // Interleaving: rank 0 holds the first stage, rank pp − 1 the last chunk.
  const Layout il = Layout::grid(1, 1, pipe(2, 2));
  EXPECT_EQ(il.tied_ranks(0, tied), (std::vector<int>{0, 1}));
}

// Groups with their own stage counts and boundaries (HetPipe's virtual workers): consecutive
// blocks of ranks, no data-parallel pairing across them.
TEST(Layout, HeterogeneousGroups) {
  const PipelineSpec a{.pp = 2, .stages = {{0, 5}, {5, 12}}};
  const PipelineSpec b{.pp = 3, .stages = {{0, 3}, {3, 9}, {9, 12}}};
  const Layout l = Layout::groups(1, {a, b});
  EXPECT_FALSE(l.homogeneous());
  ASSERT_EQ(l.world(), 5);
  EXPECT_EQ(l.group_ranks(0), (std::vector<int>{0, 1}));
  EXPECT_EQ(l.group_ranks(4), (std::vector<int>{2, 3, 4}));
  EXPECT_EQ(l.place(1).chunks, (std::vector<LayerRange>{{5, 12}}));
  EXPECT_EQ(l.place(3).chunks, (std::vector<LayerRange>{{3, 9}}));
  EXPECT_EQ(l.dp_ranks(3), std::vector<int>{3});
  EXPECT_EQ(l.pipe_ranks(3), (std::vector<int>{2, 3, 4}));
  // Identical pipelines given as groups are the homogeneous grid.
  EXPECT_TRUE(Layout::groups(1, {a, a}).homogeneous());
  EXPECT_EQ(Layout::groups(2, {a, a}).place(2).group, 1);  // grid order: tp, then dp
}

void expect_error(const std::function<void()>& f, const std::string& what);

// HetPipe's virtual workers of uneven depth (1, 2 and 3 stages) on ranks in any order: each rank's
// (group, stage, layers) is where the rank lists put it; a VW's pipeline is its ranks in stage order;
// VWs are never data-parallel replicas (not even two with equal pipelines); bad lists are errors.
TEST(Layout, VirtualWorkersOfUnevenDepthOnAnyRanks) {
  const PipelineSpec one{.pp = 1, .stages = {{0, 12}}};
  const PipelineSpec two{.pp = 2, .stages = {{0, 5}, {5, 12}}};
  const PipelineSpec three{.pp = 3, .stages = {{0, 3}, {3, 9}, {9, 12}}};
  // VW 0 = rank 4; VW 1 = ranks 5 (stage 0), 0 (stage 1); VW 2 = ranks 3, 1, 2.
  const Layout l = Layout::virtual_workers({one, two, three}, {{4}, {5, 0}, {3, 1, 2}});
  EXPECT_TRUE(l.virtual_workers());
  EXPECT_FALSE(l.homogeneous());
  ASSERT_EQ(l.world(), 6);
  ASSERT_EQ(l.num_groups(), 3);
  struct Want {
    int group, stage;
    LayerRange layers;
  };
  const std::vector<Want> want = {{1, 1, {5, 12}}, {2, 1, {3, 9}}, {2, 2, {9, 12}},
                                  {2, 0, {0, 3}},  {0, 0, {0, 12}}, {1, 0, {0, 5}}};
  for (int r = 0; r < 6; ++r) {
    const RankPlace& p = l.place(r);
    EXPECT_EQ(p.group, want[r].group) << "rank " << r;
    EXPECT_EQ(p.stage, want[r].stage) << "rank " << r;
    EXPECT_EQ(p.pipe_rank, want[r].stage) << "rank " << r;
    EXPECT_EQ(p.chunks, std::vector<LayerRange>{want[r].layers}) << "rank " << r;
    EXPECT_EQ(l.rank_of(p.group, p.pipe_rank, 0), r);
    EXPECT_EQ(l.dp_ranks(r), std::vector<int>{r});
  }
  EXPECT_EQ(l.pipe_ranks(2), (std::vector<int>{3, 1, 2}));  // stage order, not rank order
  EXPECT_EQ(l.pipe_ranks(0), (std::vector<int>{5, 0}));
  EXPECT_EQ(l.pipe_ranks(4), std::vector<int>{4});
  EXPECT_EQ(l.group_ranks(1), (std::vector<int>{1, 2, 3}));
  EXPECT_NE(l.describe().find("vw 2: ranks 3,1,2"), std::string::npos) << l.describe();
  // Equal pipelines are still virtual workers, not a data-parallel grid.
  const Layout same = Layout::virtual_workers({two, two}, {{0, 1}, {2, 3}});
  EXPECT_FALSE(same.homogeneous());
  EXPECT_EQ(same.dp(), 1);
  EXPECT_EQ(same.dp_ranks(2), std::vector<int>{2});
  expect_error([&] { Layout::virtual_workers({one, two}, {{0}, {0, 1}}); }, "rank 0 is in virtual workers 0 and 1");
  expect_error([&] { Layout::virtual_workers({one, two}, {{0}, {1, 3}}); }, "names rank 3");
  expect_error([&] { Layout::virtual_workers({one, two}, {{0}, {1}}); }, "lists 1 ranks for a pipeline of 2");
}

void expect_error(const std::function<void()>& f, const std::string& what) {
  try {
    f();
    ADD_FAILURE() << "no error, expected: " << what;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    EXPECT_FALSE(e.hint().empty());
  }
}

TEST(Layout, BadPipelinesAreErrors) {
  expect_error([] { check_pipeline({.pp = 2, .stages = {{0, 5}}}, 12); }, "1 stage boundaries");
  expect_error([] { check_pipeline({.pp = 2, .stages = {{0, 5}, {6, 12}}}, 12); }, "contiguous");
  expect_error([] { check_pipeline({.pp = 2, .stages = {{0, 5}, {5, 5}}}, 12); }, "non-empty");
  expect_error([] { check_pipeline({.pp = 2, .stages = {{0, 5}, {5, 11}}}, 12); }, "has 12");
  expect_error([] { check_pipeline({.pp = 2, .stages = {{0, 5}, {5, 12}}, .replicas = {1}}, 12); },
               "replica counts");
  expect_error([] { Layout::groups(1, {pipe(2), PipelineSpec{.pp = 1, .stages = {{0, 10}}}}); },
               "split models of 24 and 10 layers");
  check_pipeline({.pp = 2, .stages = {{0, 5}, {5, 12}}}, 12);  // fine
}

}  // namespace
}  // namespace baton::dist
