// Megatron's layer split (pipeline_chunks) and chunked GptModels: two pipeline stages run by hand
// in one process (boundary buffers copied as the executor's messages would be) give the whole
// model's loss and gradients, the tied wte's gradient being the sum of its two copies'.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "model/gpt.h"
#include "model/gpt_dims.h"

namespace baton {
namespace {

// The CPU fp32 backend: activation buffers hold floats.
float* F(void* p) { return static_cast<float*>(p); }


TEST(PipelineChunks, MegatronSplit) {
  // 8 blocks, pp = 2, vp = 2: stages 0..3 hold blocks 2s..2s+1 (global layers 1 + 2s ..).
  EXPECT_EQ(pipeline_chunks(8, 2, 2, 0), (std::vector<LayerRange>{{0, 3}, {5, 7}}));
  EXPECT_EQ(pipeline_chunks(8, 2, 2, 1), (std::vector<LayerRange>{{3, 5}, {7, 10}}));
  EXPECT_EQ(pipeline_chunks(4, 1, 1, 0), (std::vector<LayerRange>{{0, 6}}));
  EXPECT_EQ(pipeline_chunks(4, 4, 1, 3), (std::vector<LayerRange>{{4, 6}}));
  try {
    pipeline_chunks(6, 4, 1, 0);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not split evenly"), std::string::npos) << e.what();
    EXPECT_FALSE(e.hint().empty());
  }
}

GptDims dims() { return make_gpt_dims(4, 2, 16, 8, 37); }

std::vector<float> grad_of(SequentialModel& m, const std::string& name) {
  const int i = m.table().find(name);
  if (i < 0) return {};
  const float* g = m.table().at(m.grads(), i);
  return {g, g + m.table().numel(i)};
}

TEST(PipelineChunks, TwoStagesByHandMatchTheWholeModel) {
  for (Recompute rc : {Recompute::NONE, Recompute::FULL, Recompute::SELECTIVE}) {
    auto be = make_cpu_backend();
    const int B = 2, T = 8;
    SequentialModel whole(make_gpt(dims()), *be);
    SequentialModel s0(make_gpt(dims()), *be, {}, pipeline_chunks(4, 2, 1, 0), rc);
    SequentialModel s1(make_gpt(dims()), *be, {}, pipeline_chunks(4, 2, 1, 1), rc);
    // The tied wte: shared by both stages, owned by the embedding's.
    EXPECT_EQ(s0.shared_params(), std::vector<int>{s0.table().find("wte")});
    EXPECT_TRUE(s0.owns_param(s0.table().find("wte")));
    EXPECT_EQ(s1.shared_params(), std::vector<int>{s1.table().find("wte")});  // the head's copy
    EXPECT_FALSE(s1.owns_param(s1.table().find("wte")));
    EXPECT_TRUE(whole.shared_params().empty());
    for (SequentialModel* m : {&whole, &s0, &s1}) {
      m->init_weights(3);
      m->reserve(B, T, 1);
      m->zero_grads();
    }
    Rng rng(11);
    std::vector<int32_t> x(B * T), y(B * T);
    for (auto& t : x) t = static_cast<int32_t>(rng.below(37));
    for (auto& t : y) t = static_cast<int32_t>(rng.below(37));
    const float dloss = 1.0f / (B * T);
    const double ref = whole.forward(0, MicroBatch{.B = B, .T = T, .tokens = x.data(), .targets = y.data()}, true, dloss);
    whole.backward(0);

    const size_t n = s0.chunk_output_count(0, B, T);
    EXPECT_EQ(n, s1.chunk_input_count(0, B, T));
    s0.load(0, MicroBatch{.B = B, .T = T, .tokens = x.data()}, true, false);
    s0.forward_chunk(0, 0, true, dloss);
    EXPECT_EQ(s0.take_loss_sum(), 0.0);  // no head, no loss
    std::copy_n(F(s0.chunk_output(0, 0)), n, F(s1.slot_input(0)));  // SEND_ACT / RECV_ACT
    s1.load(0, MicroBatch{.B = B, .T = T, .targets = y.data()}, false, true);
    s1.forward_chunk(0, 0, true, dloss);
    const double loss = s1.take_loss_sum();
    s1.backward_chunk(0, 0);
    std::copy_n(F(s1.slot_input_grad(0)), n, F(s0.slot_output_grad(0)));  // SEND_GRAD / RECV_GRAD
    s0.backward_chunk(0, 0);
    EXPECT_NEAR(loss, ref, 1e-5 * std::abs(ref));

    for (int i = 0; i < whole.table().size(); ++i) {
      const std::string& name = whole.table().spec(i).name;
      std::vector<float> a = grad_of(s0, name), b = grad_of(s1, name);
      ASSERT_TRUE(!a.empty() || !b.empty()) << name;
      std::vector<float> got = a.empty() ? b : a;
      if (!a.empty() && !b.empty())
        for (size_t k = 0; k < got.size(); ++k) got[k] += b[k];  // the tied wte: two copies
      const std::vector<float> want = grad_of(whole, name);
      double err = 0, scale = 1e-12;
      for (size_t k = 0; k < want.size(); ++k) {
        err = std::max(err, double(std::abs(got[k] - want[k])));
        scale = std::max(scale, double(std::abs(want[k])));
      }
      EXPECT_LT(err / scale, 1e-5) << name << " recompute " << static_cast<int>(rc);
    }
  }
}

// Zero bubble (Qi et al. 2023 §2): a chunk's backward split into BWD_INPUT (input gradient, each
// matmul's / layernorm's output gradient kept in the slot) and BWD_WEIGHT (parameter gradients,
// later) gives the fused backward's input gradient and parameter gradients bit for bit — with two
// micro-batches in flight in two slots (I0 I1 W0 W1, as zb-h1 orders them) so each slot's deferred
// gradients must survive the other's backward — and INPUT really leaves the parameter gradients
// untouched (except blocks under full recomputation, which run whole in INPUT).
TEST(PipelineChunks, SplitBackwardEqualsFusedBitExact) {
  for (Recompute rc : {Recompute::NONE, Recompute::SELECTIVE, Recompute::FULL}) {
    for (int rank = 0; rank < 2; ++rank) {
      auto be = make_cpu_backend();
      const int B = 2, T = 8;
      SequentialModel fused(make_gpt(dims()), *be, {}, pipeline_chunks(4, 2, 1, rank), rc);
      SequentialModel split(make_gpt(dims()), *be, {}, pipeline_chunks(4, 2, 1, rank), rc);
      fused.init_weights(5);
      split.init_weights(5);
      fused.reserve(B, T, 2);
      split.reserve(B, T, 2, /*split_backward=*/true);
      EXPECT_GT(split.activation_bytes(), fused.activation_bytes());
      fused.zero_grads();
      split.zero_grads();
      const size_t n = rank == 0 ? fused.chunk_output_count(0, B, T) : fused.chunk_input_count(0, B, T);
      Rng rng(17);
      std::vector<std::vector<float>> din(2);
      for (int slot = 0; slot < 2; ++slot) {
        std::vector<int32_t> x(B * T), y(B * T);
        for (auto& t : x) t = static_cast<int32_t>(rng.below(37));
        for (auto& t : y) t = static_cast<int32_t>(rng.below(37));
        std::vector<float> input(n), dout(n);
        for (auto& v : input) v = rng.normal();
        for (auto& v : dout) v = 0.01f * rng.normal();
        for (SequentialModel* m : {&fused, &split}) {
          m->load(slot, MicroBatch{.B = B, .T = T, .tokens = x.data(), .targets = y.data()}, rank == 0,
                  rank == 1);
          std::copy(input.begin(), input.end(), F(m->slot_input(slot)));
          std::copy(dout.begin(), dout.end(), F(m->slot_output_grad(slot)));
          m->forward_chunk(0, slot, true, 1.0f / (B * T));
        }
      }
      for (int slot = 0; slot < 2; ++slot) fused.backward_chunk(0, slot);
      for (int slot = 0; slot < 2; ++slot) {
        split.backward_chunk(0, slot, {}, BackwardPass::INPUT);
        if (rank == 1) {  // the embedding chunk has no input gradient
          EXPECT_EQ(0, std::memcmp(split.slot_input_grad(slot), fused.slot_input_grad(slot),
                                   n * sizeof(float))) << "slot " << slot;
        }
      }
      if (rank == 1) {  // the second I overwrote nothing of the first slot's input gradient
        EXPECT_EQ(0, std::memcmp(split.slot_input_grad(0), fused.slot_input_grad(0), n * sizeof(float)));
      }
      for (int i = 0; i < split.table().size(); ++i) {
        const std::string& name = split.table().spec(i).name;
        const bool block = name.rfind("h.", 0) == 0;
        if (rc == Recompute::FULL && block) continue;  // whole backward in INPUT
        for (float g : grad_of(split, name)) ASSERT_EQ(g, 0.0f) << name << ": INPUT computed a weight gradient";
      }
      std::vector<int> after;
      for (int slot = 0; slot < 2; ++slot)
        split.backward_chunk(0, slot, [&](int l) { after.push_back(l); }, BackwardPass::WEIGHT);
      EXPECT_EQ(after.size(), size_t(2 * split.num_layers()));
      EXPECT_EQ(0, std::memcmp(split.grads(), fused.grads(), split.flat_size() * sizeof(float)))
          << "recompute " << static_cast<int>(rc) << " rank " << rank;
    }
  }
}

}  // namespace
}  // namespace baton
