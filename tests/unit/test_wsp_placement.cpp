// hetero.placement = "local" (HetPipe §8.1's ED-local; train/hetero/wsp_stage.h local_placement): every
// tensor of the global layout lands on the rank of a stage that owns it in one of the virtual
// workers (the stage holding the tensor's lowest layer: a tied embedding goes with the embedding),
// the VWs taking turns; with ED's identical VWs each stage's tensors go only to the ranks of that
// stage.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "backend/backend.h"
#include "config/config.h"
#include "config/virtual_workers.h"
#include "train/loop/session.h"
#include "train/hetero/wsp_stage.h"

namespace baton {
namespace {

struct Fixture {
  Config cfg = load_config_string("", "x", {"model.n_layer=4", "model.d_model=32", "model.n_head=2",
                                            "model.vocab_size=64", "model.seq_len=16"},
                                  1);
  std::shared_ptr<const ModelBuilder> builder = model_builder(cfg, 64);
  std::unique_ptr<Backend> be = make_cpu_backend();
  GlobalParams global = global_params(*builder, *be);
};

// The stage of `vw` holding layer l.
int stage_of(const std::vector<std::vector<int>>& ranges, int l) {
  for (size_t s = 0; s < ranges.size(); ++s)
    if (ranges[s][0] <= l && l < ranges[s][1]) return static_cast<int>(s);
  return -1;
}

TEST(WspPlacement, EveryTensorOnARankOfAStageThatOwnsIt) {
  Fixture f;
  const int L = f.builder->num_layers();  // embedding, 4 blocks, head
  ASSERT_EQ(L, 6);
  Config cfg = f.cfg;
  cfg.hetero.sync = SyncMode::WSP;
  cfg.hetero.virtual_workers = {"0:0-2, 1:2-6", "2:0-4, 3:4-5, 4:5-6"};  // 2 and 3 stages, other boundaries
  const std::vector<VirtualWorker> vws = virtual_workers(cfg.hetero, 5);
  std::vector<std::vector<std::vector<int>>> layers = {vws[0].layer_ranges(L, 0), vws[1].layer_ranges(L, 1)};
  const std::vector<int> shard = local_placement(f.global, layout_from_config(cfg, 5, *f.builder));
  ASSERT_EQ(shard.size(), static_cast<size_t>(f.global.table.size()));
  std::set<int> used;
  for (int i = 0; i < f.global.table.size(); ++i) {
    const int l = f.global.layer[static_cast<size_t>(i)];
    std::set<int> owners;
    for (size_t v = 0; v < vws.size(); ++v) owners.insert(vws[v].stages[stage_of(layers[v], l)].rank);
    EXPECT_TRUE(owners.count(shard[static_cast<size_t>(i)])) << f.global.table.spec(i).name << " on rank "
                                                             << shard[static_cast<size_t>(i)];
    used.insert(shard[static_cast<size_t>(i)]);
  }
  EXPECT_EQ(used.size(), 5u) << "both VWs' stages host tensors";
  // The tied embedding is added by layer 0 (the embedding) and held by the head too.
  const int wte = f.global.table.find("wte");
  ASSERT_GE(wte, 0);
  EXPECT_EQ(f.global.layer[static_cast<size_t>(wte)], 0);
}

TEST(WspPlacement, IdenticalVirtualWorkersKeepEachStageOnItsOwnRanks) {
  Fixture f;
  const int L = f.builder->num_layers();
  Config cfg = f.cfg;
  cfg.hetero.sync = SyncMode::WSP;
  cfg.hetero.virtual_workers = {"0:0-3, 1:3-6", "2:0-3, 3:3-6"};  // ED: stage 0 on ranks 0 and 2 (node A), 1 on 1 and 3
  ASSERT_EQ(L, 6);
  const std::vector<int> shard = local_placement(f.global, layout_from_config(cfg, 4, *f.builder));
  for (int i = 0; i < f.global.table.size(); ++i) {
    const int s = f.global.layer[static_cast<size_t>(i)] < 3 ? 0 : 1;
    const int r = shard[static_cast<size_t>(i)];
    EXPECT_TRUE(s == 0 ? (r == 0 || r == 2) : (r == 1 || r == 3)) << f.global.table.spec(i).name << " on rank " << r;
  }
}

}  // namespace
}  // namespace baton
