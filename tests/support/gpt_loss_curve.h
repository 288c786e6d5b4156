// The loss curve of a small GPT (2 layers, 4 heads, d_model 64, T 32, vocabulary 96) trained from
// seed 5 on markov_batch tokens (4 sequences a step) with AdamW at lr 3e-3, on any backend: the
// yardstick of the bf16 tests (test_mixed_precision, test_cpu_bf16_native) against fp32.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "model/gpt.h"
#include "model/gpt_dims.h"
#include "optim/adamw.h"
#include "markov_tokens.h"

namespace baton::test {

inline GptDims small_gpt_dims() { return make_gpt_dims(2, 4, 64, 32, 96); }

inline std::vector<double> small_gpt_loss_curve(Backend& be, int steps) {
  const GptDims d = small_gpt_dims();
  SequentialModel m(make_gpt(d), be);
  m.init_weights(5);
  const int B = 4, T = d.seq_len;
  m.reserve(B, T, 1);
  OptimConfig oc;
  AdamW opt(be, m.table(), oc);
  std::vector<int32_t> x, y;
  std::vector<double> losses;
  for (int step = 1; step <= steps; ++step) {
    markov_batch(step, B, T, d.vocab, x, y);
    m.zero_grads();
    losses.push_back(m.forward(0, MicroBatch{.B = B, .T = T, .tokens = x.data(), .targets = y.data()}, true,
                               1.0f / (B * T)) /
                     (B * T));
    m.backward(0);
    opt.step(m.params(), m.grads(), 3e-3, 1.0f, step);
    m.refresh_compute_params();
  }
  return losses;
}

}  // namespace baton::test
