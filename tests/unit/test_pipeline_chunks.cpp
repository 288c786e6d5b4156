// Megatron's layer split (pipeline_chunks) and chunked GptModels: two pipeline stages run by hand
// in one process (boundary buffers copied as the executor's messages would be) give the whole
// model's loss and gradients, the tied wte's gradient being the sum of its two copies'.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "model/gpt_model.h"

namespace baton {
namespace {

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

GptDims dims() {
  GptDims d;
  d.n_layer = 4;
  d.n_head = 2;
  d.d_model = 16;
  d.seq_len = 8;
  d.vocab = 37;
  d.vocab_padded = pad_vocab(d.vocab);
  return d;
}

std::vector<float> grad_of(GptModel& m, const std::string& name) {
  const int i = m.table().find(name);
  if (i < 0) return {};
  const float* g = m.table().at(m.grads(), i);
  return {g, g + m.table().numel(i)};
}

TEST(PipelineChunks, TwoStagesByHandMatchTheWholeModel) {
  for (Recompute rc : {Recompute::NONE, Recompute::FULL, Recompute::SELECTIVE}) {
    auto be = make_cpu_backend();
    const int B = 2, T = 8;
    GptModel whole(dims(), *be);
    GptModel s0(dims(), *be, {}, 16, pipeline_chunks(4, 2, 1, 0), rc);
    GptModel s1(dims(), *be, {}, 16, pipeline_chunks(4, 2, 1, 1), rc);
    EXPECT_EQ(s0.tied_wte_param(), s0.table().find("wte"));
    EXPECT_GE(s1.tied_wte_param(), 0);  // the head's copy
    EXPECT_EQ(whole.tied_wte_param(), -1);
    for (GptModel* m : {&whole, &s0, &s1}) {
      m->init_weights(3);
      m->reserve(B, T, 1);
      m->zero_grads();
    }
    Rng rng(11);
    std::vector<int32_t> x(B * T), y(B * T);
    for (auto& t : x) t = static_cast<int32_t>(rng.below(37));
    for (auto& t : y) t = static_cast<int32_t>(rng.below(37));
    const float dloss = 1.0f / (B * T);
    const double ref = whole.forward(0, x.data(), y.data(), B, T, true, dloss);
    whole.backward(0);

    const size_t n = s0.boundary_floats(B, T);
    s0.set_batch(0, x.data(), nullptr, B, T);
    EXPECT_EQ(s0.forward_chunk(0, 0, true, dloss), 0.0);
    std::copy_n(s0.chunk_output(0, 0), n, s1.slot_input(0));  // SEND_ACT / RECV_ACT
    s1.set_batch(0, nullptr, y.data(), B, T);
    const double loss = s1.forward_chunk(0, 0, true, dloss);
    s1.backward_chunk(0, 0);
    std::copy_n(s1.slot_input_grad(0), n, s0.slot_output_grad(0));  // SEND_GRAD / RECV_GRAD
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

}  // namespace
}  // namespace baton
