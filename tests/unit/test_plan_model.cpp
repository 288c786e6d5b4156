// Planner inputs (issue 7, deliverables 1–2): the device table, cluster files and model
// descriptions. FLOPs are checked against PTD-P's formulas (src/model/gpt.h), parameter counts
// against the published sizes, activation sizes against Korthikanti et al. and baton's layers.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "plan/cluster.h"
#include "plan/device.h"
#include "plan/model_desc.h"
#include "model/gpt.h"

namespace baton::plan {
namespace {

const std::string kSrc = BATON_SOURCE_DIR;

TEST(PlanDevice, LookupAndAliases) {
  EXPECT_EQ(find_device("a100").name, "A100-80GB");
  EXPECT_DOUBLE_EQ(find_device("A100").peak("bf16"), 312);
  EXPECT_DOUBLE_EQ(find_device("H100").peak("bf16"), 989);
  EXPECT_DOUBLE_EQ(find_device("h200").memory_gb, 141);
  EXPECT_DOUBLE_EQ(find_device("Titan V").memory_gb, 12);      // HetPipe Table 1
  EXPECT_DOUBLE_EQ(find_device("TITAN-RTX").mem_bw_gbs, 672);  // HetPipe Table 1
  EXPECT_DOUBLE_EQ(find_device("RTX 2060").memory_gb, 6);
  EXPECT_DOUBLE_EQ(find_device("Quadro P4000").mem_bw_gbs, 243);
  EXPECT_EQ(find_device("V100").peak("bf16"), 0);  // no bf16 before Ampere
  EXPECT_THROW(find_device("K80"), Error);
}

TEST(PlanCluster, PaperClustersLoad) {
  const Cluster sel = load_cluster(kSrc + "/configs/clusters/selene.toml");
  EXPECT_TRUE(sel.homogeneous());
  EXPECT_EQ(sel.gpus_per_node(), 8);
  EXPECT_EQ(sel.total_gpus(), 4480);
  EXPECT_EQ(sel.first_gpus(3072).total_gpus(), 3072);
  EXPECT_EQ(sel.first_gpus(12).nodes.size(), 2u);

  const Cluster het = load_cluster(kSrc + "/configs/clusters/hetpipe.toml");
  EXPECT_FALSE(het.homogeneous());
  ASSERT_EQ(het.nodes.size(), 4u);
  EXPECT_EQ(het.total_gpus(), 16);
  EXPECT_EQ(het.nodes[0].device.name, "TITAN-V");
  EXPECT_EQ(het.nodes[3].device.name, "QUADRO-P4000");
  EXPECT_DOUBLE_EQ(het.nodes[2].inter_gbs, 7);

  const Cluster a = load_cluster(kSrc + "/configs/clusters/pipedream-cluster-a.toml");
  EXPECT_EQ(a.total_gpus(), 16);
  EXPECT_EQ(a.gpus_per_node(), 4);
  EXPECT_DOUBLE_EQ(a.nodes[0].inter_gbs, 1.25);  // 10 Gb/s
  const Cluster b = load_cluster(kSrc + "/configs/clusters/pipedream-cluster-b.toml");
  EXPECT_EQ(b.total_gpus(), 16);
  EXPECT_EQ(b.gpus_per_node(), 8);
}

void expect_error(const std::string& text, const std::string& want) {
  try {
    load_cluster_string(text, "c.toml");
    FAIL() << "no error for:\n" << text;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    EXPECT_FALSE(e.hint().empty());
  }
}

TEST(PlanCluster, ErrorsNameFileAndLine) {
  expect_error("inter_node_gbs = 1\nbogus = 2\n[[nodes]]\ndevice='A100'\ngpus=8\nintra_node_gbs=1\n",
               "c.toml:2: unknown cluster key 'bogus'");
  expect_error("inter_node_gbs = 1\n[[nodes]]\ndevice='K80'\ngpus=8\nintra_node_gbs=1\n",
               "c.toml:3: unknown device type 'K80'");
  expect_error("inter_node_gbs = 1\n[[nodes]]\ndevice='A100'\nintra_node_gbs=1\n",
               "node without 'gpus'");
  expect_error("inter_node_gbs = 1\n[[nodes]]\ndevice='A100'\ngpus=0\nintra_node_gbs=1\n",
               "c.toml:4: gpus must be an integer >= 1");
  expect_error("[[nodes]]\ndevice='A100'\ngpus=8\nintra_node_gbs=1\n", "no inter_node_gbs");
  expect_error("inter_node_gbs = 1\n", "no [[nodes]]");
  expect_error("inter_node_gbs = = 1\n", "c.toml:1");
  EXPECT_THROW(load_cluster("/nonexistent.toml"), Error);
}

// relative_speed: optional, a finite number > 0, on every node or none.
TEST(PlanCluster, RelativeSpeed) {
  const std::string a = "inter_node_gbs = 1\n[[nodes]]\nname = 'a'\ndevice = 'A100'\ngpus = 8\nintra_node_gbs = 1\n";
  const std::string b = "[[nodes]]\nname = 'b'\ndevice = 'V100'\ngpus = 8\nintra_node_gbs = 1\n";
  const Cluster two = load_cluster_string(a + "relative_speed = 3\n" + b + "relative_speed = 1.5\ncount = 2\n", "c.toml");
  EXPECT_TRUE(two.measured_speeds());
  ASSERT_EQ(two.nodes.size(), 3u);
  EXPECT_DOUBLE_EQ(two.nodes[0].relative_speed, 3);
  EXPECT_DOUBLE_EQ(two.nodes[2].relative_speed, 1.5);
  EXPECT_FALSE(load_cluster_string(a + b, "c.toml").measured_speeds());
  EXPECT_TRUE(load_cluster(kSrc + "/configs/clusters/hetpipe.toml").measured_speeds());
  EXPECT_FALSE(load_cluster(kSrc + "/configs/clusters/selene.toml").measured_speeds());
  // Bad values: one line naming file:line and the key, a hint saying what the key is.
  auto expect_speed_error = [&](const std::string& text, const std::string& want, const std::string& hint) {
    try {
      load_cluster_string(text, "c.toml");
      ADD_FAILURE() << "no error for:\n" << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
      EXPECT_NE(e.hint().find(hint), std::string::npos) << e.hint();
    }
  };
  expect_speed_error(a + "relative_speed = 0\n", "c.toml:7: relative_speed must be > 0, got 0", "baton profile");
  expect_speed_error(a + "relative_speed = -2.5\n", "c.toml:7: relative_speed must be > 0, got -2.5", "higher = faster");
  expect_speed_error(a + "relative_speed = 'fast'\n", "c.toml:7: relative_speed must be a number", "baton profile");
  expect_speed_error(a + "relative_speed = true\n", "c.toml:7: relative_speed must be a number", "baton profile");
  expect_speed_error(a + "relative_speed = nan\n", "c.toml:7: relative_speed must be > 0", "baton profile");
  expect_speed_error(a + "relative_speed = inf\n", "c.toml:7: relative_speed must be finite", "baton profile");
  // Some nodes with it, others without: the file and the node without it, and one with it.
  expect_speed_error(a + "relative_speed = 3\n" + b, "c.toml:8: node 'b' has no relative_speed, but node 'a' (c.toml:2) has one",
                     "measured speeds and data-sheet peaks do not mix");
  expect_speed_error(a + b + "relative_speed = 3\n", "c.toml:2: node 'a' has no relative_speed, but node 'b' (c.toml:7) has one",
                     "or none");
}

// Σ over layers of (forward + backward) FLOPs × micro-batches = PTD-P's count (model/gpt.h), for
// any tensor-parallel degree (each device computes 1/t), and with full recomputation Eq. 4.2.
TEST(PlanGpt, FlopsMatchPtdpFormula) {
  const GptShape g{12, 12, 768, 1024, 51200};
  for (int tp : {1, 2, 4}) {
    for (const char* rc : {"none", "full"}) {
      GptOptions o;
      o.micro_batch = 4;
      o.tp = tp;
      o.recompute = rc;
      const ModelDesc m = gpt_desc(g, o);
      double per_mb = 0;
      for (const auto& l : m.layers) per_mb += l.fwd_flops + l.bwd_flops;
      const int B = 64;
      const double want = std::string(rc) == "none"
                              ? gpt_model_flops_per_step(B, g.seq_len, g.n_layer, g.d_model, g.vocab)
                              : gpt_hardware_flops_full_recompute(B, g.seq_len, g.n_layer,
                                                                  g.d_model, g.vocab);
      EXPECT_NEAR(per_mb * tp * B / o.micro_batch, want, want * 1e-12) << tp << rc;
      EXPECT_NEAR(m.hardware_flops_per_sample * B, want, want * 1e-12);
      EXPECT_NEAR(m.model_flops_per_sample * B,
                  gpt_model_flops_per_step(B, g.seq_len, g.n_layer, g.d_model, g.vocab),
                  want * 1e-12);
    }
  }
}

// Parameter counts of the PTD-P Table 1 models (papers/README.md), Eq. 4.3.
TEST(PlanGpt, ParamsMatchTable1) {
  struct Row { double billions; int heads, h, l; };
  for (Row r : {Row{1.7, 24, 2304, 24}, {3.6, 32, 3072, 30}, {7.5, 32, 4096, 36},
                {18.4, 48, 6144, 40}, {39.1, 64, 8192, 48}, {76.1, 80, 10240, 60},
                {145.6, 96, 12288, 80}, {310.1, 128, 16384, 96}, {529.6, 128, 20480, 105},
                {1008.0, 160, 25600, 128}}) {
    const ModelDesc m = gpt_desc({r.l, r.heads, r.h, 2048, 51200}, {});
    const double h = r.h, l = r.l;  // Eq. 4.3 exactly; the table rounds (1.65B is listed as 1.7B)
    const double eq43 = 12 * l * h * h * (1 + 13 / (12 * h) + (51200 + 2048) / (12 * l * h));
    EXPECT_NEAR(m.total_params - 2 * h, eq43, 1e-9 * eq43);  // + the final layernorm Eq. 4.3 omits
    EXPECT_NEAR(m.total_params / 1e9, r.billions, r.billions * 0.03) << r.billions;
  }
}

// Megatron activation memory per layer (Korthikanti et al. Table 2): sbh(34 + 5as/h) bytes
// without tensor parallelism, sbh(10 + 24/t + 5as/(ht)) with it, 2sbh with full recomputation.
TEST(PlanGpt, MegatronActivationSizes) {
  const GptShape g{4, 16, 1024, 512, 51200};
  const double s = 512, b = 2, h = 1024, a = 16;
  GptOptions o;
  o.micro_batch = 2;
  EXPECT_DOUBLE_EQ(gpt_desc(g, o).layers[1].stash_bytes, s * b * h * (34 + 5 * a * s / h));
  o.tp = 4;
  EXPECT_DOUBLE_EQ(gpt_desc(g, o).layers[1].stash_bytes,
                   s * b * h * (10 + 24.0 / 4 + 5 * a * s / (h * 4)));
  o.sequence_parallel = true;
  EXPECT_DOUBLE_EQ(gpt_desc(g, o).layers[1].stash_bytes, s * b * h * (34.0 / 4 + 5 * a * s / (h * 4)));
  o.recompute = "full";
  EXPECT_DOUBLE_EQ(gpt_desc(g, o).layers[1].stash_bytes, 2 * s * b * h / 4);
  o.recompute = "selective";
  EXPECT_DOUBLE_EQ(gpt_desc(g, o).layers[1].stash_bytes, s * b * h * 34.0 / 4);
}

}  // namespace
}  // namespace baton::plan
