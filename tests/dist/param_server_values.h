// Test values for the WSP parameter server and its client (test_param_server, test_server_client):
// tensors with gaps between them in a flat buffer, w0 and each VW's waves as small integers, so
// every float sum is exact in any order, and the snapshot a pull must return.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "dist/param_server.h"

namespace baton::dist::values {

// Tensors of several sizes with gaps between them in the flat buffer (the gaps are not w_global).
inline std::vector<TensorSpan> spans() { return {{0, 1}, {3, 7}, {10, 1000}, {1011, 3}, {1020, 64}, {1084, 5}}; }
constexpr size_t kFlat = 1100;

inline float w0(size_t j) { return static_cast<float>(j % 17); }
// VW v's wave k: a different integer pattern per (v, k, position).
inline float delta(int v, int k, size_t j) { return static_cast<float>((v + 1) * (k + 1) + int(j % 5) - 2); }

// w0 on the tensors, −1 in the gaps.
inline std::vector<float> initial() {
  std::vector<float> w(kFlat, -1.0f);
  for (const TensorSpan& t : spans())
    for (size_t j = t.offset; j < t.offset + t.count; ++j) w[j] = w0(j);
  return w;
}

// VW v's wave k over the whole flat buffer (the gaps too: a push must not carry them anywhere).
inline std::vector<float> wave(int v, int k) {
  std::vector<float> d(kFlat);
  for (size_t j = 0; j < kFlat; ++j) d[j] = delta(v, k, j);
  return d;
}

// w0 + every one of `n` VWs' waves 0 … c_global − 1 on the tensors; `gap` in the gaps (unchecked
// when none is given).
inline void expect_snapshot(const std::vector<float>& got, int64_t c_global, int n,
                            std::optional<float> gap = std::nullopt) {
  std::vector<bool> in(kFlat, false);
  for (const TensorSpan& t : spans())
    for (size_t j = t.offset; j < t.offset + t.count; ++j) in[j] = true;
  for (size_t j = 0; j < kFlat; ++j) {
    if (!in[j] && !gap) continue;
    float want = in[j] ? w0(j) : *gap;
    if (in[j])
      for (int v = 0; v < n; ++v)
        for (int k = 0; k < c_global; ++k) want += delta(v, k, j);
    ASSERT_EQ(got[j], want) << "element " << j << " at c_global " << c_global;
  }
}

}  // namespace baton::dist::values
