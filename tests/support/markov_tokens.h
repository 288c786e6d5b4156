// Token streams with structure to learn, for loss-curve tests: a fixed random permutation gives
// each token's successor (with 10% noise), so a small GPT's loss falls well below ln V within tens
// of steps. Batch `step` is a pure function of (step, B, T, V).
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "core/rng.h"

namespace baton::test {

inline void markov_batch(int step, int B, int T, int V, std::vector<int32_t>& x,
                         std::vector<int32_t>& y) {
  Rng perm(99);
  std::vector<int32_t> next(V);
  for (int i = 0; i < V; ++i) next[i] = i;
  for (int i = V - 1; i > 0; --i) std::swap(next[i], next[perm.below(i + 1)]);
  Rng rng(1000 + step);
  x.resize(size_t(B) * T);
  y.resize(size_t(B) * T);
  for (int b = 0; b < B; ++b) {
    int32_t t = static_cast<int32_t>(rng.below(V));
    for (int i = 0; i < T; ++i) {
      x[b * T + i] = t;
      t = rng.uniform() < 0.1 ? static_cast<int32_t>(rng.below(V)) : next[t];
      y[b * T + i] = t;
    }
  }
}

}  // namespace baton::test
