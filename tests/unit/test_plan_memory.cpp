// The planner's memory prediction for a tiny GPT (fp32, baton's own activation layout) matches
// what the CPU trainer actually allocates — parameters, gradients, AdamW moments and the model's
// activation arena (SequentialModel::reserve(micro_batch, T, 1), as in train/loop/trainer.cpp) — within 10%.
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "model/gpt.h"
#include "plan/ptdp.h"

namespace baton::plan {
namespace {

TEST(PlanMemory, TinyGptMatchesCpuTrainer) {
  struct Case { int layers, heads, d, T, vocab, micro; };
  for (Case c : {Case{4, 4, 64, 32, 256, 4}, {2, 2, 128, 64, 512, 2}, {4, 4, 256, 128, 8192, 8}}) {
    GptDims dims{c.layers, c.heads, c.d, c.T, c.vocab, c.vocab};
    auto be = make_cpu_backend();
    SequentialModel model(make_gpt(dims), *be);
    model.reserve(c.micro, c.T, 1);
    // params + grads + AdamW m, v: four flat fp32 buffers of table().total() floats.
    const double actual = 4.0 * 4 * model.table().total() + model.activation_bytes();

    PtdpProblem pb;
    pb.shape = {c.layers, c.heads, c.d, c.T, c.vocab};
    pb.global_batch = c.micro;
    pb.dtype = "fp32";
    pb.act_layout = ActLayout::BATON_FP32;
    pb.cluster = load_cluster_string(
        "inter_node_gbs = 1\n[[nodes]]\ndevice = 'A100'\ngpus = 1\nintra_node_gbs = 1\n", "one.toml");
    pb.assume.overhead_gb = 0;  // no CUDA context on the CPU
    const Prediction p = evaluate(pb, Layout{1, 1, 1, 1, c.micro, "1f1b", "none"}, true);
    ASSERT_EQ(p.memory_gb.size(), 1u);
    const double predicted = p.memory_gb[0] * 1e9;
    EXPECT_NEAR(predicted / actual, 1.0, 0.10)
        << c.layers << "x" << c.d << ": predicted " << predicted << " actual " << actual;
  }
}

}  // namespace
}  // namespace baton::plan
