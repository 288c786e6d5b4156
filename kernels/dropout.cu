// Dropout and classification hits (kernels/dropout.cuh): grid-stride loops, one element (dropout)
// or one row (hits) per thread.
#include "kernels/common.cuh"
#include "kernels/dropout.cuh"
#include "src/core/dropout_mask.h"

namespace baton::kernels {
namespace {

constexpr int kThreads = 256;
int blocks_for(size_t n) { return int(std::min<size_t>((n + kThreads - 1) / kThreads, 65535u * 8)); }

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(bf16 v) { return __bfloat162float(v); }
__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(bf16* p, float v) { *p = __float2bfloat16_rn(v); }

template <typename T>
__global__ void dropout_kernel(T* y, const T* x, size_t n, int row_elems, uint32_t threshold, float scale,
                               uint64_t seed, int64_t first_row) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint64_t row = uint64_t(first_row) + i / row_elems, j = i % row_elems;
    store(y + i, dropout_keep(seed, row, j, threshold) ? to_f32(x[i]) * scale : 0.0f);
  }
}

template <typename T>
__global__ void hits_kernel(float* hits1, float* hits5, const T* logits, const int32_t* targets, int N, int V,
                            int ld) {
  for (int n = blockIdx.x * blockDim.x + threadIdx.x; n < N; n += gridDim.x * blockDim.x) {
    const int t = targets[n];
    const bool valid = t >= 0 && t < V;
    int above = 0;
    if (valid) {
      const T* row = logits + size_t(n) * ld;
      const float target = to_f32(row[t]);
      for (int j = 0; j < V; ++j) above += to_f32(row[j]) > target;
    }
    hits1[n] = valid && above < 1 ? 1.0f : 0.0f;
    hits5[n] = valid && above < 5 ? 1.0f : 0.0f;
  }
}

template <typename T>
void launch_dropout(T* y, const T* x, int rows, int row_elems, float p, uint64_t seed, int64_t first_row,
                    cudaStream_t s) {
  const size_t n = size_t(rows) * row_elems;
  if (n == 0) return;
  BATON_KCHECK("dropout", y && x && p >= 0.0f && p < 1.0f);
  dropout_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(y, x, n, row_elems, dropout_threshold(p), 1.0f / (1.0f - p),
                                                    seed, first_row);
  check_launch("dropout");
}

template <typename T>
void launch_hits(float* hits1, float* hits5, const T* logits, const int32_t* targets, int N, int V, int ld,
                 cudaStream_t s) {
  if (N == 0) return;
  BATON_KCHECK("classification_hits", hits1 && hits5 && logits && targets && V > 0 && ld >= V);
  hits_kernel<T><<<blocks_for(size_t(N)), kThreads, 0, s>>>(hits1, hits5, logits, targets, N, V, ld);
  check_launch("classification_hits");
}

}  // namespace

void dropout(float* y, const float* x, int rows, int row_elems, float p, uint64_t seed, int64_t first_row,
             cudaStream_t s) {
  launch_dropout(y, x, rows, row_elems, p, seed, first_row, s);
}
void dropout(bf16* y, const bf16* x, int rows, int row_elems, float p, uint64_t seed, int64_t first_row,
             cudaStream_t s) {
  launch_dropout(y, x, rows, row_elems, p, seed, first_row, s);
}
void classification_hits(float* hits1, float* hits5, const float* logits, const int32_t* targets, int N, int V,
                         int ld, cudaStream_t s) {
  launch_hits(hits1, hits5, logits, targets, N, V, ld, s);
}
void classification_hits(float* hits1, float* hits5, const bf16* logits, const int32_t* targets, int N, int V,
                         int ld, cudaStream_t s) {
  launch_hits(hits1, hits5, logits, targets, N, V, ld, s);
}

}  // namespace baton::kernels
