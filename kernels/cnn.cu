// The small kernels of the CNN ops (kernels/cnn.cuh): grid-stride elementwise loops (ReLU in bf16
// over groups of 8 elements, 16-byte accesses when aligned), a flat loop for the per-channel bias
// add, and one block per channel for the bias gradient (fixed partition and combining order:
// deterministic, no atomics).
#include "kernels/cast.cuh"
#include "kernels/cnn.cuh"
#include "kernels/common.cuh"

namespace baton::kernels {
namespace {

constexpr int kThreads = 256;
int blocks_for(size_t n) { return int(std::min<size_t>((n + kThreads - 1) / kThreads, 65535u * 8)); }

// ReLU that keeps NaN (x > 0 is false for NaN, so test it separately).
__device__ __forceinline__ float relu(float x) { return x > 0.0f || x != x ? x : 0.0f; }

__global__ void relu_forward_kernel(float* y, const float* x, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    y[i] = relu(x[i]);
}
__global__ void relu_backward_kernel(float* dx, const float* y, const float* dy, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

// bf16: the values are selected, never computed, so packing them back is exact.
template <bool kVec>
__global__ void relu_forward_bf16_kernel(bf16* y, const bf16* x, size_t n) {
  const size_t groups = (n + 7) / 8;
  for (size_t g = blockIdx.x * size_t(blockDim.x) + threadIdx.x; g < groups; g += size_t(gridDim.x) * blockDim.x) {
    const size_t i = g * 8;
    const int valid = n - i < 8 ? int(n - i) : 8;
    float v[8];
    unpack8(v, load_group<kVec>(x + i, valid));
#pragma unroll
    for (int j = 0; j < 8; j++) v[j] = relu(v[j]);
    store_group<kVec>(y + i, pack8(v), valid);
  }
}
template <bool kVec>
__global__ void relu_backward_bf16_kernel(bf16* dx, const bf16* y, const bf16* dy, size_t n) {
  const size_t groups = (n + 7) / 8;
  for (size_t g = blockIdx.x * size_t(blockDim.x) + threadIdx.x; g < groups; g += size_t(gridDim.x) * blockDim.x) {
    const size_t i = g * 8;
    const int valid = n - i < 8 ? int(n - i) : 8;
    float out[8], d[8];
    unpack8(out, load_group<kVec>(y + i, valid));
    unpack8(d, load_group<kVec>(dy + i, valid));
#pragma unroll
    for (int j = 0; j < 8; j++) d[j] = out[j] > 0.0f ? d[j] : 0.0f;
    store_group<kVec>(dx + i, pack8(d), valid);
  }
}

__global__ void axpby_kernel(float* y, float a, const float* x, float b, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    y[i] = a * x[i] + b * y[i];
}

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(bf16 v) { return __bfloat162float(v); }
__device__ __forceinline__ void store_f32(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_f32(bf16* p, float v) { *p = __float2bfloat16_rn(v); }

// y[N,K,PQ] += bias[K], flat over the N*K*PQ elements (the channel of element i is (i / PQ) % K).
template <typename T>
__global__ void conv_bias_forward_kernel(T* y, const T* bias, size_t total, int K, int PQ) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x) {
    const int k = int((i / size_t(PQ)) % size_t(K));
    store_f32(y + i, to_f32(y[i]) + to_f32(bias[k]));
  }
}

// db[k] += sum of dy[n, k, :] over n: block k, each thread a fixed strided slice of every row, then
// the block's fixed-order tree (common.cuh block_sum).
template <typename T>
__global__ void conv_bias_backward_kernel(float* db, const T* dy, int N, int K, int PQ) {
  __shared__ float partial[32];
  const int k = blockIdx.x;
  float acc = 0.0f;
  for (int n = 0; n < N; n++) {
    const T* row = dy + (size_t(n) * K + k) * size_t(PQ);
    for (int j = threadIdx.x; j < PQ; j += blockDim.x) acc += to_f32(row[j]);
  }
  const float total = block_sum(acc, partial);
  if (threadIdx.x == 0) db[k] += total;
}

__global__ void batchnorm_inv_std_kernel(float* inv_std, const float* var, float eps, int C) {
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < C; c += gridDim.x * blockDim.x)
    inv_std[c] = 1.0f / sqrtf(var[c] + eps);
}

template <typename T>
void bias_forward(T* y, const T* bias, int N, int K, int PQ, cudaStream_t s) {
  BATON_KCHECK("conv_bias_forward", N >= 0 && K >= 0 && PQ >= 0);
  const size_t total = size_t(N) * size_t(K) * size_t(PQ);
  if (total == 0) return;
  BATON_KCHECK("conv_bias_forward", y != nullptr && bias != nullptr);
  conv_bias_forward_kernel<T><<<blocks_for(total), kThreads, 0, s>>>(y, bias, total, K, PQ);
  check_launch("conv_bias_forward");
}

template <typename T>
void bias_backward(float* db, const T* dy, int N, int K, int PQ, cudaStream_t s) {
  BATON_KCHECK("conv_bias_backward", N >= 0 && K >= 0 && PQ >= 0);
  if (K == 0) return;
  BATON_KCHECK("conv_bias_backward", db != nullptr && (dy != nullptr || size_t(N) * PQ == 0));
  conv_bias_backward_kernel<T><<<K, kThreads, 0, s>>>(db, dy, N, K, PQ);
  check_launch("conv_bias_backward");
}

}  // namespace

void relu_forward(float* y, const float* x, size_t n, cudaStream_t s) {
  if (n == 0) return;
  BATON_KCHECK("relu_forward", y != nullptr && x != nullptr);
  relu_forward_kernel<<<blocks_for(n), kThreads, 0, s>>>(y, x, n);
  check_launch("relu_forward");
}

void relu_forward(bf16* y, const bf16* x, size_t n, cudaStream_t s) {
  if (n == 0) return;
  BATON_KCHECK("relu_forward", y != nullptr && x != nullptr);
  const int blocks = blocks_for((n + 7) / 8);
  if (aligned16(y) && aligned16(x))
    relu_forward_bf16_kernel<true><<<blocks, kThreads, 0, s>>>(y, x, n);
  else
    relu_forward_bf16_kernel<false><<<blocks, kThreads, 0, s>>>(y, x, n);
  check_launch("relu_forward");
}

void relu_backward(float* dx, const float* y, const float* dy, size_t n, cudaStream_t s) {
  if (n == 0) return;
  BATON_KCHECK("relu_backward", dx != nullptr && y != nullptr && dy != nullptr);
  relu_backward_kernel<<<blocks_for(n), kThreads, 0, s>>>(dx, y, dy, n);
  check_launch("relu_backward");
}

void relu_backward(bf16* dx, const bf16* y, const bf16* dy, size_t n, cudaStream_t s) {
  if (n == 0) return;
  BATON_KCHECK("relu_backward", dx != nullptr && y != nullptr && dy != nullptr);
  const int blocks = blocks_for((n + 7) / 8);
  if (aligned16(dx) && aligned16(y) && aligned16(dy))
    relu_backward_bf16_kernel<true><<<blocks, kThreads, 0, s>>>(dx, y, dy, n);
  else
    relu_backward_bf16_kernel<false><<<blocks, kThreads, 0, s>>>(dx, y, dy, n);
  check_launch("relu_backward");
}

void axpby(float* y, float a, const float* x, float b, size_t n, cudaStream_t s) {
  if (n == 0) return;
  BATON_KCHECK("axpby", y != nullptr && x != nullptr);
  axpby_kernel<<<blocks_for(n), kThreads, 0, s>>>(y, a, x, b, n);
  check_launch("axpby");
}

void conv_bias_forward(float* y, const float* bias, int N, int K, int PQ, cudaStream_t s) {
  bias_forward(y, bias, N, K, PQ, s);
}
void conv_bias_forward(bf16* y, const bf16* bias, int N, int K, int PQ, cudaStream_t s) {
  bias_forward(y, bias, N, K, PQ, s);
}
void conv_bias_backward(float* db, const float* dy, int N, int K, int PQ, cudaStream_t s) {
  bias_backward(db, dy, N, K, PQ, s);
}
void conv_bias_backward(float* db, const bf16* dy, int N, int K, int PQ, cudaStream_t s) {
  bias_backward(db, dy, N, K, PQ, s);
}

void batchnorm_inv_std(float* inv_std, const float* var, float eps, int C, cudaStream_t s) {
  BATON_KCHECK("batchnorm_inv_std", C >= 0 && eps >= 0.0f);
  if (C == 0) return;
  BATON_KCHECK("batchnorm_inv_std", inv_std != nullptr && var != nullptr);
  batchnorm_inv_std_kernel<<<ceil_div(C, kThreads), kThreads, 0, s>>>(inv_std, var, eps, C);
  check_launch("batchnorm_inv_std");
}

}  // namespace baton::kernels
