// Shared by the multi-rank invariance and semantics tests: a tiny GPT's sizes and synthetic data
// that is a pure function of (seed, step, row), so every layout sees the same global batch.
#pragma once
#include <cstdint>

#include "core/rng.h"
#include "model/gpt_dims.h"

namespace baton::test {

inline GptDims tiny_gpt_dims(int layers, int seq, int vocab) { return make_gpt_dims(layers, 4, 32, seq, vocab); }

// Rows [row, row + rows) of step `step`: arithmetic progressions modulo the vocabulary (random
// start and stride per row), learnable in context, so the loss falls and every parameter's
// gradient carries signal. x and y are [rows, seq]; y is x shifted by one token.
inline void synthetic_rows(uint64_t seed, int seq, int vocab, int64_t step, int row, int rows,
                           int32_t* x, int32_t* y) {
  for (int r = 0; r < rows; ++r)
    for (int t = 0; t <= seq; ++t) {
      const uint64_t h = mix({seed, uint64_t(step), uint64_t(row + r)});
      const int32_t tok = static_cast<int32_t>((h % vocab + (1 + (h >> 32) % 5) * t) % vocab);
      if (t < seq) x[r * seq + t] = tok;
      if (t > 0) y[r * seq + t - 1] = tok;
    }
}

}  // namespace baton::test
