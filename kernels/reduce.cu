// Two-stage deterministic reductions (see reduce.cuh).
#include <cuda_bf16.h>

#include "kernels/common.cuh"
#include "kernels/reduce.cuh"

namespace baton::kernels {
namespace {

constexpr size_t kSqChunk = 16384;  // elements per stage-1 block of sum_squares
constexpr int kSqThreads = 256;

__global__ void sumsq_partial_kernel(double* partial, const float* x, size_t n) {
  __shared__ double scratch[32];
  const size_t begin = blockIdx.x * kSqChunk, end = min(n, begin + kSqChunk);
  double acc = 0.0;
  for (size_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const double v = x[i];
    acc += v * v;
  }
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void sum_doubles_kernel(double* result, const double* partial, size_t m) {
  __shared__ double scratch[32];
  double acc = 0.0;
  for (size_t i = threadIdx.x; i < m; i += blockDim.x) acc += partial[i];
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) *result = acc;
}

__global__ void accumulate_sum_kernel(double* acc, const float* x, size_t n) {
  __shared__ double scratch[32];
  double s = 0.0;
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) s += x[i];
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) *acc += s;
}

// Column sums: block (32, 8) covers 32 columns of one row chunk; ty strides the rows. The input is
// fp32 or bf16 (bias gradients of the bf16 dense layer); the sums are fp32 either way.
__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__global__ void colsum_partial_kernel(float* partial, const T* x, int N, int C, int rows) {
  __shared__ float sh[8][33];
  const int c = blockIdx.x * 32 + threadIdx.x;
  const int r0 = blockIdx.y * rows, r1 = min(N, r0 + rows);
  float acc = 0.0f;
  if (c < C)
    for (int r = r0 + threadIdx.y; r < r1; r += 8) acc += to_f32(x[size_t(r) * C + c]);
  sh[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; k++) s += sh[k][threadIdx.x];
    partial[size_t(blockIdx.y) * C + c] = s;
  }
}

__global__ void colsum_finish_kernel(float* dst, const float* partial, int chunks, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float s = 0.0f;
  for (int k = 0; k < chunks; k++) s += partial[size_t(k) * C + c];
  dst[c] += s;
}

}  // namespace

void accumulate_sum(double* acc, const float* x, size_t n, cudaStream_t s) {
  BATON_KCHECK("accumulate_sum", acc != nullptr && (x != nullptr || n == 0));
  if (n == 0) return;
  accumulate_sum_kernel<<<1, 256, 0, s>>>(acc, x, n);
  check_launch("accumulate_sum");
}

size_t sum_squares_scratch_doubles(size_t n) { return (n + kSqChunk - 1) / kSqChunk + 1; }

void sum_squares(double* result, const float* x, size_t n, double* scratch, size_t scratch_doubles,
                 cudaStream_t s) {
  BATON_KCHECK("sum_squares", result != nullptr && scratch != nullptr);
  BATON_KCHECK("sum_squares", scratch_doubles >= sum_squares_scratch_doubles(n));
  const size_t blocks = (n + kSqChunk - 1) / kSqChunk;
  BATON_KCHECK("sum_squares", blocks < (size_t(1) << 31));
  if (blocks > 0) {
    BATON_KCHECK("sum_squares", x != nullptr);
    sumsq_partial_kernel<<<unsigned(blocks), kSqThreads, 0, s>>>(scratch, x, n);
    check_launch("sum_squares");
  }
  sum_doubles_kernel<<<1, 1024, 0, s>>>(result, scratch, blocks);
  check_launch("sum_squares");
}

int column_chunk_rows(int N) {
  // At most 64 chunks, at least 64 rows each.
  return std::max(64, ceil_div(N, 64));
}

size_t column_sum_scratch_floats(int N, int C) {
  return size_t(ceil_div(std::max(N, 1), column_chunk_rows(N))) * size_t(C);
}

template <typename T>
void column_sum_impl(float* dst, const T* x, int N, int C, float* scratch, size_t scratch_floats,
                     cudaStream_t s) {
  BATON_KCHECK("column_sum", N >= 0 && C > 0);
  if (N == 0) return;
  BATON_KCHECK("column_sum", dst != nullptr && x != nullptr && scratch != nullptr);
  BATON_KCHECK("column_sum", scratch_floats >= column_sum_scratch_floats(N, C));
  const int rows = column_chunk_rows(N), chunks = ceil_div(N, rows);
  colsum_partial_kernel<T><<<dim3(ceil_div(C, 32), chunks), dim3(32, 8), 0, s>>>(scratch, x, N, C, rows);
  check_launch("column_sum");
  colsum_finish_kernel<<<ceil_div(C, 256), 256, 0, s>>>(dst, scratch, chunks, C);
  check_launch("column_sum");
}

void column_sum(float* dst, const float* x, int N, int C, float* scratch, size_t scratch_floats,
                cudaStream_t s) {
  column_sum_impl(dst, x, N, C, scratch, scratch_floats, s);
}

void column_sum(float* dst, const __nv_bfloat16* x, int N, int C, float* scratch,
                size_t scratch_floats, cudaStream_t s) {
  column_sum_impl(dst, x, N, C, scratch, scratch_floats, s);
}

}  // namespace baton::kernels
