// GPT end to end on the CPU backend: finite-difference gradient check of a 2-layer model, loss at
// initialisation ~ ln(V), and overfitting one repeated batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/rng.h"
#include "model/gpt.h"
#include "optim/adamw.h"

namespace baton {
namespace {

GptDims tiny_dims(int layers, int vocab) {
  GptDims d;
  d.n_layer = layers;
  d.n_head = 2;
  d.d_model = 16;
  d.seq_len = 8;
  d.vocab = vocab;
  d.vocab_padded = pad_vocab(vocab);
  return d;
}

std::vector<int32_t> random_tokens(size_t n, int vocab, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng.below(vocab));
  return t;
}

// Mean loss of one micro-batch (no gradient). `training`: with dropout's masks (batch 3, row 5).
double mean_loss(SequentialModel& m, const std::vector<int32_t>& x, const std::vector<int32_t>& y, int B, int T,
                 bool training = false) {
  const MicroBatch mb{.B = B, .T = T, .tokens = x.data(), .targets = y.data(), .batch = 3, .row = 5};
  return m.forward(0, mb, training, 0.0f) / (double(B) * T);
}

// Directional derivative check, one parameter tensor at a time: for a random direction u supported
// on that tensor, (L(p + h u) - L(p - h u)) / 2h must match grad . u. The loss is accumulated in
// double but the model runs in fp32, so the difference quotient carries rounding noise of about
// 1e-7 * L / h ~ 1e-5 and truncation error O(h^2) ~ 1e-6 with h = 1e-3 (weights ~0.02-1):
// a relative tolerance of 2e-2 (with an absolute floor) separates a correct gradient from a wrong
// one, which is typically off by O(1). With dropout the loss is evaluated with the same masks as
// the gradient (they are a function of the seed, batch and row, not of a call count).
void check_gradient(float dropout) {
  GptDims d = tiny_dims(2, 37);
  d.dropout = dropout;
  auto be = make_cpu_backend();
  SequentialModel m(make_gpt(d), *be);
  m.init_weights(7);
  m.set_seed(11);
  // Larger-than-default weights so every path carries signal (norm gains, biases nonzero).
  {
    Rng rng(99);
    float* p = m.params();
    for (size_t i = 0; i < m.table().total(); ++i) p[i] += 0.1f * rng.normal();
  }
  const int B = 2, T = 6;
  m.reserve(B, T, 1);
  auto x = random_tokens(size_t(B) * T, d.vocab, 1), y = random_tokens(size_t(B) * T, d.vocab, 2);
  m.zero_grads();
  const MicroBatch mb{.B = B, .T = T, .tokens = x.data(), .targets = y.data(), .batch = 3, .row = 5};
  const double train_loss = m.forward(0, mb, true, 1.0f / (B * T)) / (B * T);
  m.backward(0);
  std::vector<float> grad(m.grads(), m.grads() + m.table().total());
  const bool training = dropout > 0;
  // Dropout changes the training loss; evaluation (no dropout) gives the dropout-free loss.
  if (training) {
    EXPECT_GT(std::abs(train_loss - mean_loss(m, x, y, B, T)), 1e-3);
  }

  const float h = 1e-3f;
  Rng rng(5);
  for (int i = 0; i < m.table().size(); ++i) {
    float* p = m.table().at(m.params(), i);
    const size_t n = m.table().numel(i);
    std::vector<float> u(n), saved(p, p + n);
    double gu = 0;
    for (size_t k = 0; k < n; ++k) {
      u[k] = rng.normal();
      gu += double(u[k]) * m.table().at(grad.data(), i)[k];
    }
    for (size_t k = 0; k < n; ++k) p[k] = saved[k] + h * u[k];
    const double lp = mean_loss(m, x, y, B, T, training);
    for (size_t k = 0; k < n; ++k) p[k] = saved[k] - h * u[k];
    const double lm = mean_loss(m, x, y, B, T, training);
    std::copy(saved.begin(), saved.end(), p);
    const double fd = (lp - lm) / (2.0 * h);
    EXPECT_NEAR(fd, gu, 2e-2 * std::abs(gu) + 2e-3) << m.table().spec(i).name << " dropout " << dropout;
  }
}

TEST(GptModel, GradientMatchesFiniteDifferencesPerTensor) { check_gradient(0.0f); }
// Hidden dropout (embedding output, attention and MLP branches): the backward applies the
// forward's masks.
TEST(GptModel, GradientWithDropoutMatchesFiniteDifferencesPerTensor) { check_gradient(0.3f); }

// zero_grads() clears nothing (LayerCtx::grad_unwritten): the first backward op on each tensor
// writes it, and a layer's tensors that no op wrote are zeroed when its backward ends. Whatever the
// buffer held before — NaN in every float, the padding included — two micro-batches' gradients are
// those of a model whose buffer was never used, bit for bit: in fp32 and bf16, the backward whole and
// split into zero bubble's input and weight parts, with the tied wte written by the head and added
// to by the embedding.
TEST(GptModel, GradientsRestartWithoutClearingTheBuffer) {
  const GptDims d = tiny_dims(2, 37);
  const int B = 2, T = 6;
  for (DType act : {DType::F32, DType::BF16})
    for (bool split : {false, true}) {
      auto be = make_cpu_backend(act);
      auto run = [&](SequentialModel& m) {
        m.zero_grads();
        for (int k = 0; k < 2; ++k) {
          const auto x = random_tokens(size_t(B) * T, d.vocab, 10 + k), y = random_tokens(size_t(B) * T, d.vocab, 20 + k);
          m.forward(0, MicroBatch{.B = B, .T = T, .tokens = x.data(), .targets = y.data()}, true, 1.0f / (2 * B * T));
          if (split) {
            m.backward_chunk(0, 0, nullptr, BackwardPass::INPUT);
            m.backward_chunk(0, 0, nullptr, BackwardPass::WEIGHT);
          } else {
            m.backward(0);
          }
        }
        return std::vector<float>(m.grads(), m.grads() + m.flat_size());
      };
      SequentialModel unused(make_gpt(d), *be), used(make_gpt(d), *be);
      for (SequentialModel* m : {&unused, &used}) {
        m->init_weights(7);
        m->reserve(B, T, 1, split);
      }
      const std::vector<float> want = run(unused);
      run(used);
      std::fill(used.grads(), used.grads() + used.flat_size(), std::nanf(""));
      const std::vector<float> got = run(used);
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float)))
          << dtype_name(act) << (split ? " split" : " whole");
      EXPECT_NE(want[used.table().offset(used.table().find("wte"))], 0.0f);
    }
}

TEST(GptModel, PaddedVocabularyRowsGetNoGradient) {
  const GptDims d = tiny_dims(1, 37);
  auto be = make_cpu_backend();
  SequentialModel m(make_gpt(d), *be);
  m.init_weights(3);
  const int B = 2, T = 8;
  m.reserve(B, T, 1);
  auto x = random_tokens(B * T, d.vocab, 1), y = random_tokens(B * T, d.vocab, 2);
  m.zero_grads();
  m.forward(0, MicroBatch{.B = B, .T = T, .tokens = x.data(), .targets = y.data()}, true, 1.0f / (B * T));
  m.backward(0);
  const int wte = m.table().find("wte");
  const float* g = m.table().at(m.grads(), wte);
  double real = 0, pad = 0;
  for (int v = 0; v < d.vocab_padded; ++v)
    for (int c = 0; c < d.d_model; ++c) (v < d.vocab ? real : pad) += std::abs(g[v * d.d_model + c]);
  EXPECT_GT(real, 0.0);
  EXPECT_EQ(pad, 0.0);
}

TEST(GptModel, LossAtInitialisationIsLogVocab) {
  for (int vocab : {64, 500}) {
    GptDims d = tiny_dims(2, vocab);
    d.d_model = 32;
    auto be = make_cpu_backend();
    SequentialModel m(make_gpt(d), *be);
    m.init_weights(11);
    const int B = 4, T = 8;
    m.reserve(B, T, 1);
    auto x = random_tokens(B * T, vocab, 3), y = random_tokens(B * T, vocab, 4);
    EXPECT_NEAR(mean_loss(m, x, y, B, T), std::log(double(vocab)), 0.05) << "vocab " << vocab;
  }
}

TEST(GptModel, OverfitsOneRepeatedBatch) {
  const GptDims d = tiny_dims(2, 50);
  auto be = make_cpu_backend();
  SequentialModel m(make_gpt(d), *be);
  m.init_weights(1);
  const int B = 4, T = 8;
  m.reserve(B, T, 1);
  auto x = random_tokens(B * T, d.vocab, 8), y = random_tokens(B * T, d.vocab, 9);
  OptimConfig oc;
  oc.weight_decay = 0.0;
  AdamW opt(*be, m.table(), oc);
  const double first = mean_loss(m, x, y, B, T);
  double loss = first;
  for (int step = 1; step <= 300; ++step) {
    m.zero_grads();
    loss = m.forward(0, MicroBatch{.B = B, .T = T, .tokens = x.data(), .targets = y.data()}, true, 1.0f / (B * T)) / (B * T);
    m.backward(0);
    opt.step(m.params(), m.grads(), 3e-3, 1.0f, step);
  }
  EXPECT_GT(first, 3.5);
  EXPECT_LT(loss, 0.05) << "started at " << first;
}

TEST(GptModel, InitialisationDependsOnlyOnSeedAndName) {
  const GptDims d = tiny_dims(2, 40);
  auto be = make_cpu_backend();
  SequentialModel a(make_gpt(d), *be), b(make_gpt(d), *be), c(make_gpt(d), *be);
  a.init_weights(5);
  b.init_weights(5);
  c.init_weights(6);
  EXPECT_TRUE(std::equal(a.params(), a.params() + a.table().total(), b.params()));
  EXPECT_FALSE(std::equal(a.params(), a.params() + a.table().total(), c.params()));
}

}  // namespace
}  // namespace baton
