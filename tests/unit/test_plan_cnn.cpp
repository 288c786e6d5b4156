// The planner's CNN descriptions (app/plan_model.h) are the runtime's models layer for layer — the
// same count, order, names and forward FLOPs as CnnBuilder, the parameters SequentialModel
// allocates, each layer's output the next one's input — over the depths, widths, image sizes,
// channels and classes the runtime accepts, and they reproduce the papers' published sizes; and
// the partitions become layouts and config snippets that `baton train` accepts
// (app/plan_snippet.h), or the closest ones with a line saying what could not be expressed.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "app/plan_model.h"
#include "app/plan_snippet.h"
#include "core/error.h"
#include "model/sequential_model.h"

namespace baton::app {
namespace {

CnnDims dims(ModelKind kind, int depth, int image = 224, double width = 1.0, int in_channels = 3,
             int classes = 1000, bool bn = true) {
  return CnnDims{.kind = kind, .depth = depth, .image_size = image, .in_channels = in_channels, .classes = classes,
                 .width = width, .batch_norm = bn};
}

void expect_runtime_layers(const CnnDims& d, int micro_batch) {
  const CnnBuilder b(d);
  const plan::ModelDesc m = cnn_model_desc(b, micro_batch, DType::F32);
  const std::string what = b.describe();
  ASSERT_EQ(m.size(), b.num_layers()) << what;
  auto be = make_cpu_backend();
  for (int g = 0; g < b.num_layers(); ++g) {
    EXPECT_EQ(m.layers[g].name, b.layer_name(g)) << what << " layer " << g;
    EXPECT_DOUBLE_EQ(m.layers[g].fwd_flops, b.layer_flops(g) * micro_batch) << what << " layer " << g;
    EXPECT_DOUBLE_EQ(m.layers[g].bwd_flops, 2 * m.layers[g].fwd_flops);
    EXPECT_GT(m.layers[g].stash_bytes, 0) << what << " layer " << g;
    // A cut after layer g sends what layer g + 1 receives.
    if (g + 1 < b.num_layers()) {
      EXPECT_DOUBLE_EQ(m.layers[g].out_bytes,
                       double(b.make_layer(g + 1, TensorParallel{}, *be, Recompute::NONE)->input_bytes(micro_batch, 1)))
          << what << " cut after layer " << g;
    }
  }
  EXPECT_DOUBLE_EQ(m.model_flops_per_sample, b.flops_per_step(1)) << what;
  EXPECT_DOUBLE_EQ(m.input_bytes, double(d.in_channels) * d.image_size * d.image_size * micro_batch * 4) << what;
}

TEST(PlanCnn, DescriptionIsTheRuntimesLayers) {
  for (int depth : {18, 34, 50, 101, 152})
    for (int image : {28, 32, 64, 224}) expect_runtime_layers(dims(ModelKind::RESNET, depth, image, 0.25), 2);
  for (int depth : {11, 13, 16, 19})
    for (bool bn : {false, true})
      for (int image : {32, 64, 224}) expect_runtime_layers(dims(ModelKind::VGG, depth, image, 0.25, 3, 1000, bn), 2);
  expect_runtime_layers(dims(ModelKind::RESNET, 18, 32, 0.125, 1, 10), 4);
  expect_runtime_layers(dims(ModelKind::VGG, 11, 32, 0.5, 1, 7), 3);
  expect_runtime_layers(dims(ModelKind::RESNET, 50, 224, 1.0), 1);
}

// The parameters the runtime allocates (SequentialModel's table), for small models.
TEST(PlanCnn, ParametersAreTheModels) {
  auto be = make_cpu_backend();
  for (const CnnDims& d : {dims(ModelKind::RESNET, 18, 32, 0.125, 1, 10), dims(ModelKind::RESNET, 50, 32, 0.125, 3, 100),
                           dims(ModelKind::VGG, 11, 32, 0.125, 3, 10, false), dims(ModelKind::VGG, 16, 64, 0.125, 3, 10, true)}) {
    const auto b = make_cnn(d);
    const SequentialModel model(b, *be);
    EXPECT_DOUBLE_EQ(cnn_model_desc(*b, 1, DType::F32).total_params, double(model.table().count())) << b->describe();
  }
}

// The papers' CNNs at 224×224: torchvision's parameter counts, the published forward GMACs, the
// sizes HetPipe quotes; linear in the micro-batch.
TEST(PlanCnn, PapersModels) {
  struct Row {
    ModelKind kind;
    int depth;
    double params, gmacs;
    int layers;
  };
  for (Row r : {Row{ModelKind::VGG, 16, 138357544, 15.47, 16}, {ModelKind::VGG, 19, 143667240, 19.63, 19},
                {ModelKind::RESNET, 50, 25557032, 4.09, 18}, {ModelKind::RESNET, 152, 60192808, 11.5, 52}}) {
    const CnnBuilder b(dims(r.kind, r.depth, 224, 1.0, 3, 1000, false));
    const plan::ModelDesc m = cnn_model_desc(b, 1, DType::F32);
    EXPECT_DOUBLE_EQ(m.total_params, r.params) << b.family();
    EXPECT_EQ(m.size(), r.layers) << b.family();
    double fwd = 0;
    for (const auto& l : m.layers) fwd += l.fwd_flops;
    EXPECT_NEAR(fwd / 2e9, r.gmacs, r.gmacs * 0.03) << b.family();
    const plan::ModelDesc m8 = cnn_model_desc(b, 8, DType::F32);
    EXPECT_DOUBLE_EQ(m8.layers[3].fwd_flops, 8 * m.layers[3].fwd_flops);
    EXPECT_DOUBLE_EQ(m8.layers[3].out_bytes, 8 * m.layers[3].out_bytes);
    EXPECT_DOUBLE_EQ(m8.total_params, m.total_params);
  }
  // HetPipe §8.3 (notes-hetpipe-madpipe §A.8): VGG-19 "548MB" and ResNet-152 "230MB" of fp32 parameters (MiB).
  EXPECT_NEAR(cnn_model_desc(CnnBuilder(dims(ModelKind::VGG, 19, 224, 1.0, 3, 1000, false)), 1, DType::F32).total_params *
                  4 / (1 << 20), 548, 3);
  EXPECT_NEAR(cnn_model_desc(CnnBuilder(dims(ModelKind::RESNET, 152)), 1, DType::F32).total_params * 4 / (1 << 20), 230, 2);
  // ResNet-50 at 224: the first bottleneck outputs 256×56×56; bf16 halves it.
  EXPECT_DOUBLE_EQ(cnn_model_desc(CnnBuilder(dims(ModelKind::RESNET, 50)), 1, DType::F32).layers[1].out_bytes,
                   256.0 * 56 * 56 * 4);
  EXPECT_DOUBLE_EQ(cnn_model_desc(CnnBuilder(dims(ModelKind::RESNET, 50)), 1, DType::BF16).layers[1].out_bytes,
                   256.0 * 56 * 56 * 2);
}

// ---- partitions as runnable layouts ----

plan::PdPlan pd(std::vector<plan::PdStage> stages) {
  plan::PdPlan p;
  p.stages = std::move(stages);
  p.workers = 0;
  for (const auto& s : p.stages) p.workers += s.replicas;
  return p;
}

TEST(PlanSnippet, PipeDreamLayouts) {
  // Straight pipeline and equal first/last replication: exactly PipeDream's plan.
  RunLayout l = pipedream_layout(pd({{0, 3, 1}, {4, 9, 1}}));
  EXPECT_TRUE(l.unexpressible.empty());
  EXPECT_EQ(l.schedule, "pipedream");
  EXPECT_EQ(l.stages, (std::vector<std::pair<int, int>>{{0, 4}, {4, 10}}));
  EXPECT_TRUE(l.replicas.empty());
  EXPECT_EQ(l.ranks(), 2);
  l = pipedream_layout(pd({{0, 3, 2}, {4, 6, 1}, {7, 9, 2}}));
  EXPECT_TRUE(l.unexpressible.empty());
  EXPECT_EQ(l.replicas, (std::vector<int>{2, 1, 2}));
  EXPECT_EQ(l.ranks(), 5);
  // One replicated stage is data parallelism.
  l = pipedream_layout(pd({{0, 9, 16}}));
  EXPECT_TRUE(l.unexpressible.empty());
  EXPECT_EQ(l.schedule, "1f1b");
  EXPECT_EQ(l.dp, 16);
  EXPECT_EQ(l.ranks(), 16);
  // 12-3-1 (Table 1's shape): the runtime needs first = last; the closest keeps the boundaries.
  l = pipedream_layout(pd({{0, 9, 12}, {10, 12, 3}, {13, 15, 1}}));
  EXPECT_NE(l.unexpressible.find("12x and the last 1x"), std::string::npos) << l.unexpressible;
  EXPECT_EQ(l.replicas, (std::vector<int>{1, 3, 1}));
  EXPECT_EQ(l.ranks(), 5);
  l = pipedream_layout(pd({{0, 4, 2}, {5, 8, 1}, {9, 9, 1}}));
  EXPECT_FALSE(l.unexpressible.empty());
  EXPECT_TRUE(l.replicas.empty());  // 1-1-1: an unreplicated pipeline
  EXPECT_EQ(l.ranks(), 3);
}

TEST(PlanSnippet, MadPipeLayouts) {
  using S = plan::MpStage;
  // Normal GPUs 0, 1 and the special GPU 2 with one stage: a straight pipeline, run with 2bw.
  RunLayout l = madpipe_layout({S{1, 3}, S{4, 6}, S{7, 10, true}}, {0, 1, 2});
  EXPECT_TRUE(l.unexpressible.empty());
  EXPECT_EQ(l.stages, (std::vector<std::pair<int, int>>{{0, 3}, {3, 6}, {6, 10}}));
  EXPECT_EQ(l.schedule, "2bw");
  // Adjacent special stages merge into one range.
  l = madpipe_layout({S{1, 3}, S{4, 5, true}, S{6, 10, true}}, {0, 1, 1});
  EXPECT_TRUE(l.unexpressible.empty());
  EXPECT_EQ(l.stages, (std::vector<std::pair<int, int>>{{0, 3}, {3, 10}}));
  // Non-contiguous stages on the special GPU: not expressible; every stage on its own rank.
  l = madpipe_layout({S{1, 2, true}, S{3, 6}, S{7, 10, true}}, {1, 0, 1});
  EXPECT_NE(l.unexpressible.find("non-contiguous stages [0, 2) and [6, 10)"), std::string::npos) << l.unexpressible;
  EXPECT_EQ(l.ranks(), 3);
  EXPECT_EQ(madpipe_layout({S{1, 10}}, {0}).schedule, "1f1b");
  EXPECT_EQ(madpipe_layout({S{1, 3}, S{4, 10}}, {0, 1}).schedule, "2bw");
}

TEST(PlanSnippet, HetPipeLayouts) {
  // Ranks 0.. in VW order, each stage RANK@DEVICE:FIRST-END of the runtime's global layers.
  const std::vector<VwPartition> vws{{"VRG", {"TITAN-V", "TITAN-RTX", "RTX-2060"}, {0, 4, 9}, true},
                                     {"GGG", {"RTX-2060", "RTX-2060", "RTX-2060"}, {}, false},
                                     {"VVV", {"TITAN-V", "TITAN-V", "TITAN-V"}, {0, 5, 6}, true}};
  HeteroLayout l = hetpipe_layout(vws, 12, 3);
  EXPECT_EQ(l.virtual_workers, (std::vector<std::string>{"0@TITAN-V:0-4, 1@TITAN-RTX:4-9, 2@RTX-2060:9-12",
                                                         "3@TITAN-V:0-5, 4@TITAN-V:5-6, 5@TITAN-V:6-12"}));
  EXPECT_EQ(l.ranks, 6);
  EXPECT_EQ(l.nm, 3);
  // A VW that fits nowhere is left out, said in one line.
  EXPECT_NE(l.unexpressible.find("virtual worker 1 GGG fits no partition in memory at Nm = 3"), std::string::npos)
      << l.unexpressible;
  l = hetpipe_layout({vws[0]}, 12, 1);
  EXPECT_TRUE(l.unexpressible.empty());
  EXPECT_EQ(l.ranks, 3);
}

class Snippets : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = std::filesystem::temp_directory_path() /
            ("baton_snippet_" + std::to_string(::getpid()) + ".toml");
    std::ofstream(path_) << "[model]\nkind = \"resnet\"\nn_layer = 18\nimage_size = 32\nwidth = 0.125\n"
                            "classes = 10\n[data]\nsynthetic = true\n[train]\nmicro_batch = 4\nglobal_batch = 8\n";
    cfg_ = load_config(path_.string());
  }
  void TearDown() override { std::filesystem::remove(path_); }
  std::filesystem::path path_;
  Config cfg_;
};

TEST_F(Snippets, KeysTrainAndTheBatchSplits) {
  RunLayout l;
  l.stages = {{0, 4}, {4, 7}, {7, 10}};
  l.replicas = {3, 1, 3};
  l.schedule = "pipedream";
  const Snippet s = make_snippet(path_.string(), {}, cfg_, 10, l, "test");
  EXPECT_EQ(s.ranks, 7);
  EXPECT_EQ(s.global_batch, 12);  // 8 rounded up to micro-batches a multiple of 3
  const Config c = load_config(path_.string(), s.sets, s.ranks);
  EXPECT_EQ(c.parallel.pp, 3);
  EXPECT_EQ(c.parallel.stages, (std::vector<std::vector<int>>{{0, 4}, {4, 7}, {7, 10}}));
  EXPECT_EQ(c.parallel.replicas, (std::vector<int>{3, 1, 3}));
  EXPECT_NE(s.toml.find("stages = [[0, 4], [4, 7], [7, 10]]"), std::string::npos) << s.toml;
  EXPECT_NE(s.toml.find("mpirun -n 7 baton train"), std::string::npos) << s.toml;
  // 2bw needs m >= pp micro-batches per step.
  l = RunLayout{.stages = {{0, 2}, {2, 4}, {4, 6}, {6, 10}}, .schedule = "2bw"};
  EXPECT_EQ(make_snippet(path_.string(), {}, cfg_, 10, l, "t").global_batch, 16);
  // A layout the runtime refuses is an error, never a snippet.
  l = RunLayout{.stages = {{0, 4}, {4, 10}}, .replicas = {2, 1}, .schedule = "pipedream"};
  EXPECT_THROW(make_snippet(path_.string(), {}, cfg_, 10, l, "t"), Error);
}

}  // namespace
}  // namespace baton::app
