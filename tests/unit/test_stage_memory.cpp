// Planner memory = runtime memory (issue 23 item 4): the HetPipe planner's memory of a stage
// (pipeline/stage_memory.h, through plan_hetpipe) is exactly what the trainer allocates for that
// stage — the model (weights, gradients, buffers), the optimizer's state, the weight versions the
// hetpipe schedule stashes and the activation slots — counted byte for byte by the CPU backend
// (its memory-limit accounting, which hetero.memory_limit emulates devices with), over models,
// optimizers, precisions, partitions and Nm; and the schedule counts (slots, weight versions) are
// the hetpipe program's. tests/e2e/test_plan_hetpipe_memory.sh checks the same through whole
// training runs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "app/hetpipe_plan.h"
#include "app/plan_chain.h"
#include "backend/backend.h"
#include "backend/device.h"
#include "config/config.h"
#include "core/error.h"
#include "model/sequential_model.h"
#include "optim/optimizer.h"
#include "pipeline/stage_memory.h"
#include "train/loop/session.h"
#include "train/loop/weight_versions.h"

namespace baton {
namespace {

const std::string kSrc = BATON_SOURCE_DIR;

// The bytes the CPU backend has in use: the smallest limit under which one more (64-byte)
// allocation succeeds is that + 64.
size_t in_use(Backend& be) {
  size_t lo = 1, hi = size_t(1) << 42;
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    be.set_memory_limit({.bytes = mid});
    try {
      be.release(be.alloc(1));
      hi = mid;
    } catch (const Error&) {
      lo = mid + 1;
    }
  }
  be.set_memory_limit({});
  return lo - 64;
}

// What the trainer allocates for one stage rank of a virtual worker (train/loop/session.cpp,
// step_runner.cpp): the model of its layers, its optimizer, the slots and the weight stash.
size_t trainer_bytes(const Config& cfg, int first, int end, const pipeline::StageCounts& counts) {
  const std::shared_ptr<const ModelBuilder> builder = model_builder(cfg, 0);
  const std::unique_ptr<Backend> be = make_cpu_backend(parse_compute_dtype(cfg.precision.compute));
  SequentialModel model(builder, *be, {}, {LayerRange{first, end}}, Recompute::NONE, 16);
  model.reserve(cfg.train.micro_batch, builder->max_positions(), counts.slots);
  const std::unique_ptr<Optimizer> opt =
      make_optimizer(*be, every_parameter(model.table()), model.table().total(), cfg.optim);
  WeightVersions versions(model);
  if (counts.weight_versions > 0) versions.start(counts.weight_versions);
  return in_use(*be);
}

// The planner's memory of every stage of every VW (np on two nodes of `k` GPUs, at Nm) against the
// trainer's allocations for the same stage.
void expect_planner_is_runtime(const std::string& config, const std::vector<std::string>& sets, int k, int nm,
                               double tolerance = 0) {
  const Config cfg = load_config(config, sets, 1);
  const plan::Cluster cl = plan::load_cluster_string(
      fmt::format("inter_node_gbs = 7\n[[nodes]]\ndevice = 'A100'\ngpus = {}\nintra_node_gbs = 15.75\ncount = 2\n", k),
      "two.toml");
  const app::Chain ch = app::make_chain(cfg, "", cl, "test");
  const app::HetpipePlan p = app::plan_hetpipe(ch, cl, "np", k, nm);
  ASSERT_EQ(p.feasible(), 2) << config;
  const plan::HpPlan& plan = p.vws[0].plan;
  for (int q = 0; q < k; ++q) {
    const size_t planned = plan.stage_memory[q].total();
    const size_t actual =
        trainer_bytes(cfg, plan.first_layer[q], plan.first_layer[q + 1], pipeline::hetpipe_stage_counts(k, nm, q));
    const std::string what = fmt::format("{} {} | stage {} of {} (layers {}-{}), Nm {}", config, fmt::join(sets, " "), q,
                                         k, plan.first_layer[q], plan.first_layer[q + 1], nm);
    if (tolerance == 0) {
      EXPECT_EQ(planned, actual) << what;
    } else {
      EXPECT_NEAR(double(planned) / double(actual), 1.0, tolerance) << what << ": planned " << planned << " actual "
                                                                       << actual;
    }
  }
}

// The hetpipe program's counts (HetPipe §4): stage s < k − 1 admits max(Nm − s, 1) minibatches, the
// last one (forward and backward as one task); one more slot for evaluation; every stage keeps Nm
// weight versions (minibatch p computes on the local updates 1 … p − Nm, kept until its
// backward). A VW of one stage runs a flush program: one slot, no stash.
TEST(StageMemory, HetpipeCounts) {
  for (int pp = 2; pp <= 5; ++pp)
    for (int nm = 1; nm <= 9; ++nm)
      for (int s = 0; s < pp; ++s) {
        const pipeline::StageCounts c = pipeline::hetpipe_stage_counts(pp, nm, s);
        EXPECT_EQ(c.slots, (s == pp - 1 ? 1 : std::max(nm - s, 1)) + pipeline::kEvaluationSlots)
            << "pp " << pp << " Nm " << nm << " stage " << s;
        EXPECT_EQ(c.weight_versions, nm) << "pp " << pp << " Nm " << nm << " stage " << s;
      }
  const pipeline::StageCounts one = pipeline::hetpipe_stage_counts(1, 7, 0);
  EXPECT_EQ(one.slots, 1);
  EXPECT_EQ(one.weight_versions, 0);
}

// Each term of the formula, on a stage whose sizes are round numbers (granularity 64).
TEST(StageMemory, Terms) {
  const std::vector<pipeline::LayerBytes> layers{
      {.param_floats = 160, .buffer_floats = 16, .saved = 1000, .in = 512, .out = 640, .work = 100},
      {.param_floats = 320, .buffer_floats = 0, .saved = 300, .in = 640, .out = 256, .work = 700}};
  const pipeline::StageContext ctx{.input_bytes = 192, .target_bytes = 16, .act_size = 4, .metrics = 2,
                                   .optimizer_states = 2};
  const pipeline::StageMemory m = pipeline::stage_memory(layers, true, false, ctx, {.slots = 3, .weight_versions = 4});
  const size_t F = 480 * 4;                        // 1920 bytes of weights
  EXPECT_EQ(m.weights, F + 64 + 64);               // masters, buffers (64), 3 doubles of loss (64)
  EXPECT_EQ(m.gradients, F);
  EXPECT_EQ(m.optimizer, 2 * F);
  EXPECT_EQ(m.versions, 4 * F);
  // Per slot: saved 1024 + 512 (256-aligned each) = 1536, 3 boundary buffers of max(512, 256) = 512,
  // inputs 192; once: workspace 704, 2 × the largest output 640.
  EXPECT_EQ(m.activations, 3 * (1536 + 3 * 512 + 192) + 704 + 2 * 640);
  // The last stage: targets instead of inputs, no output sent on (boundary = its input, 512).
  const pipeline::StageMemory last = pipeline::stage_memory(layers, false, true, ctx, {.slots = 3, .weight_versions = 4});
  EXPECT_EQ(last.activations, 3 * (1536 + 3 * 512 + 64) + 704 + 2 * 640);
  // The whole model: no boundary buffers; a flush program keeps no stash; bf16 adds compute copies.
  const pipeline::StageMemory whole = pipeline::stage_memory(layers, true, true, ctx, {.slots = 1});
  EXPECT_EQ(whole.activations, 1536 + 192 + 64 + 704 + 2 * 640);
  EXPECT_EQ(whole.versions, 0u);
  pipeline::StageContext bf16 = ctx;
  bf16.act_size = 2;
  const pipeline::StageMemory b = pipeline::stage_memory(layers, true, false, bf16, {.slots = 3, .weight_versions = 4});
  EXPECT_EQ(b.weights, F + F / 2 + 64 + 64);
  EXPECT_EQ(b.versions, 4 * (F + F / 2));
}

// The planner's CNN stages are the trainer's to the byte: ResNet (batch norm buffers, the e2e
// test's model), VGG without batch norm, SGD with and without momentum, AdamW, bf16 compute, 2 and 3
// stages, Nm from 1 to 5.
TEST(StageMemory, PlannerEqualsTheTrainersAllocations) {
  const std::string resnet = kSrc + "/configs/resnet50.toml";
  const std::vector<std::string> tiny{"model.n_layer=18",   "model.width=0.125",     "model.image_size=12",
                                      "model.in_channels=1", "model.classes=10",      "train.micro_batch=4",
                                      "train.global_batch=8"};
  for (int nm : {1, 3, 5}) expect_planner_is_runtime(resnet, tiny, 2, nm);
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), tiny.begin(), tiny.end());
    return more;
  };
  expect_planner_is_runtime(resnet, with({"optim.momentum=0"}), 2, 2);
  // AdamW (two state tensors): a CNN config without SGD's keys.
  const std::string adamw = (std::filesystem::temp_directory_path() /
                             ("baton_stage_memory_" + std::to_string(::getpid()) + ".toml")).string();
  std::ofstream(adamw) << "[model]\nkind = \"resnet\"\n[optim]\nkind = \"adamw\"\n";
  expect_planner_is_runtime(adamw, tiny, 3, 4);
  std::filesystem::remove(adamw);
  expect_planner_is_runtime(resnet, with({"precision.compute=\"bf16\""}), 2, 3);
  expect_planner_is_runtime(kSrc + "/configs/vgg16.toml",
                            {"model.n_layer=11", "model.width=0.125", "model.image_size=32", "model.batch_norm=false",
                             "model.classes=10", "train.micro_batch=2", "train.global_batch=4"},
                            3, 2);
}

// A GPT's planner description is analytical (plan/gpt_desc.cpp: a block's parameters as one run of
// 12h² + 13h floats, the activations of baton's fp32 layout): exact when d_model is a multiple of 16
// (every tensor then starts 16-float aligned anyway), within 0.1% otherwise (measured 0.04%).
TEST(StageMemory, GptStagesAreTheTrainers) {
  expect_planner_is_runtime(kSrc + "/configs/quickstart.toml",
                            {"model.vocab_size=512", "train.micro_batch=2", "train.global_batch=4"}, 2, 3);
  expect_planner_is_runtime(kSrc + "/configs/quickstart.toml",
                            {"model.vocab_size=300", "model.d_model=72", "model.n_head=3", "model.seq_len=24",
                             "train.micro_batch=3", "train.global_batch=6"}, 3, 2, 0.001);
}

}  // namespace
}  // namespace baton
