// CpuBackend token + position embeddings: out[B,T,C] = wte[tokens[b,t], :] + wpe[t, :], where
// wte may be this rank's vocab-parallel shard (rows [vocab_start, vocab_start + vocab_rows)): tokens
// outside it contribute zeros, and the tensor-parallel all-reduce adds the shards up.
// The backward is a scatter-add into dwte[V,C]; two rows with the same token would race if rows
// were split among threads, so it is split by channel blocks instead: each thread owns whole
// columns and adds the (b,t) rows in order. No atomics, bit-identical results for any thread count.
#include <algorithm>

#include "backend/cpu/cpu_ops.h"
#include "core/dtype.h"
#include "core/error.h"

namespace baton {

namespace {

using cpu_detail::store_f32;
using cpu_detail::to_f32;

// out row = wte row (or 0 outside this shard) + wpe row, in fp32, stored as T (bf16: rounded once).
template <typename T>
void embed(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int T_, int C, int vocab_start,
           int vocab_rows) {
  BATON_ASSERT(B >= 0 && T_ >= 0 && C > 0, "embedding_forward: bad shape B={} T={} C={}", B, T_, C);
  const int N = B * T_;
  // Checked before the parallel loop: an exception must not escape an OpenMP region.
  for (int n = 0; n < N; n++)
    BATON_ASSERT(tokens[n] >= 0, "embedding_forward: negative token {} at row {}", tokens[n], n);
#pragma omp parallel for schedule(static) if (size_t(N) * C >= cpu_detail::kSerialBelow)
  for (int n = 0; n < N; n++) {
    const int t = n % T_;
    const int32_t row = tokens[n] - vocab_start;
    T* o = out + size_t(n) * C;
    const T* we = row >= 0 && row < vocab_rows ? wte + size_t(row) * C : nullptr;
    const T* pe = wpe != nullptr ? wpe + size_t(t) * C : nullptr;
#pragma omp simd
    for (int c = 0; c < C; c++) {
      float v = we ? to_f32(we[c]) : 0.0f;
      if (pe) v += to_f32(pe[c]);
      store_f32(o + c, v);
    }
  }
}

}  // namespace

void CpuOps::embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T,
                               int C, int vocab_start, int vocab_rows) {
  embed(out, tokens, wte, wpe, B, T, C, vocab_start, vocab_rows);
}
void CpuOps::embedding_forward(uint16_t* out, const int32_t* tokens, const uint16_t* wte, const uint16_t* wpe,
                               int B, int T, int C, int vocab_start, int vocab_rows) {
  embed(out, tokens, wte, wpe, B, T, C, vocab_start, vocab_rows);
}

void CpuOps::embedding_backward(float* dwte, float* dwpe, const float* dout,
                                    const int32_t* tokens, int B, int T, int C, int vocab_start,
                                    int vocab_rows) {
  BATON_ASSERT(B >= 0 && T >= 0 && C > 0, "embedding_backward: bad shape B={} T={} C={}", B, T, C);
  const int N = B * T;
  const bool parallel = size_t(N) * C >= cpu_detail::kSerialBelow;
  const int nblocks = (C + cpu_detail::kColBlock - 1) / cpu_detail::kColBlock;
  // dwte[V,C] += dout[n,:] at row tokens[n], for n in order, per column block.
#pragma omp parallel for schedule(static) if (parallel)
  for (int blk = 0; blk < nblocks; blk++) {
    const int c0 = blk * cpu_detail::kColBlock, c1 = std::min(C, c0 + cpu_detail::kColBlock);
    for (int n = 0; n < N; n++) {
      const int32_t row = tokens[n] - vocab_start;
      if (row < 0 || row >= vocab_rows) continue;
      float* dw = dwte + size_t(row) * C;
      const float* dy = dout + size_t(n) * C;
#pragma omp simd
      for (int c = c0; c < c1; c++) dw[c] += dy[c];
    }
  }
  // dwpe[T,C] += sum_b dout[b,t,:]: rows t are independent, b summed in order.
  if (dwpe == nullptr) return;
#pragma omp parallel for schedule(static) if (parallel)
  for (int t = 0; t < T; t++) {
    float* dp = dwpe + size_t(t) * C;
    for (int b = 0; b < B; b++) {
      const float* dy = dout + (size_t(b) * T + t) * C;
#pragma omp simd
      for (int c = 0; c < C; c++) dp[c] += dy[c];
    }
  }
}

}  // namespace baton
