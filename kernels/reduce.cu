// Two-stage deterministic reductions (see reduce.cuh).
#include <cuda_bf16.h>

#include "kernels/cast.cuh"
#include "kernels/common.cuh"
#include "kernels/reduce.cuh"

namespace baton::kernels {
namespace {

constexpr size_t kSqChunk = 16384;  // elements per stage-1 block of sum_squares
constexpr int kSqThreads = 256;

// One chunk's sum of squares and the sum of m partials, shared by the single-span and the
// span-table kernels so both give the same bits: the per-span call and sum_squares_spans agree.
__device__ __forceinline__ double sumsq_chunk(const float* x, size_t begin, size_t end, double* scratch) {
  double acc = 0.0;
  for (size_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const double v = x[i];
    acc += v * v;
  }
  return block_sum(acc, scratch);
}
__device__ __forceinline__ double sum_doubles(const double* partial, size_t m, double* scratch) {
  double acc = 0.0;
  for (size_t i = threadIdx.x; i < m; i += blockDim.x) acc += partial[i];
  return block_sum(acc, scratch);
}

__global__ void sumsq_partial_kernel(double* partial, const float* x, size_t n) {
  __shared__ double scratch[32];
  const size_t begin = blockIdx.x * kSqChunk;
  const double acc = sumsq_chunk(x, begin, min(n, begin + kSqChunk), scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void sum_doubles_kernel(double* result, const double* partial, size_t m) {
  __shared__ double scratch[32];
  const double acc = sum_doubles(partial, m, scratch);
  if (threadIdx.x == 0) *result = acc;
}

// The span table's stage 1: block b is chunk (b - first_partial) of the last span whose
// first_partial <= b (an empty span shares its first_partial with the next and is never picked).
__global__ void sumsq_spans_partial_kernel(double* partial, const float* x, const SumSqSpan* spans,
                                           int count) {
  __shared__ double scratch[32];
  const size_t b = blockIdx.x;
  const SumSqSpan sp = entry_of_block(spans, count, b, &SumSqSpan::first_partial);
  const size_t begin = (b - sp.first_partial) * kSqChunk;
  const double acc = sumsq_chunk(x + sp.offset, begin, min(sp.n, begin + kSqChunk), scratch);
  if (threadIdx.x == 0) partial[b] = acc;
}

// Stage 2: block i sums span i's partials as sum_doubles_kernel does for one span.
__global__ void sumsq_spans_finish_kernel(double* results, const double* partial, const SumSqSpan* spans) {
  __shared__ double scratch[32];
  const SumSqSpan sp = spans[blockIdx.x];
  const double acc = sum_doubles(partial + sp.first_partial, (sp.n + kSqChunk - 1) / kSqChunk, scratch);
  if (threadIdx.x == 0) results[blockIdx.x] = acc;
}

__global__ void accumulate_sum_kernel(double* acc, const float* x, size_t n) {
  __shared__ double scratch[32];
  double s = 0.0;
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) s += x[i];
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) *acc += s;
}

// Column sums: block (32, 8) covers 32 * V columns of one row chunk, V = 4 fp32 or 8 bf16 (16
// bytes); thread (tx, ty) owns the V adjacent columns from (blockIdx.x * 32 + tx) * V and adds rows
// r0 + ty, r0 + ty + 8, ... of them, one 16-byte load per row (kVec: C % V == 0 and x 16-byte
// aligned; else element by element in the same order, same bits); then each column's 8 ty sums in
// ty order. The input is fp32 or bf16 (bias gradients of the bf16 dense layer); the sums are fp32.
template <bool kVec>
__device__ __forceinline__ void load_cols(float (&f)[4], const float* p, int valid) {
  if (kVec && valid == 4) {
    const float4 v = *reinterpret_cast<const float4*>(p);
    f[0] = v.x, f[1] = v.y, f[2] = v.z, f[3] = v.w;
  } else {
#pragma unroll
    for (int j = 0; j < 4; j++) f[j] = j < valid ? p[j] : 0.0f;
  }
}
template <bool kVec>
__device__ __forceinline__ void load_cols(float (&f)[8], const __nv_bfloat16* p, int valid) {
  unpack8(f, load_group<kVec>(p, valid));
}

template <typename T, bool kVec>
__global__ void __launch_bounds__(256) colsum_partial_kernel(float* partial, const T* x, int N, int C, int rows) {
  constexpr int V = 16 / sizeof(T);
  __shared__ float sh[8][V][33];  // [ty][column within the thread's V][tx]
  const int c0 = (blockIdx.x * 32 + threadIdx.x) * V;
  const int r0 = blockIdx.y * rows, r1 = min(N, r0 + rows);
  float acc[V];
#pragma unroll
  for (int j = 0; j < V; j++) acc[j] = 0.0f;
  if (c0 < C) {
    const int valid = min(V, C - c0);
    for (int r = r0 + threadIdx.y; r < r1; r += 8) {
      float f[V];
      load_cols<kVec>(f, x + size_t(r) * C + c0, valid);
#pragma unroll
      for (int j = 0; j < V; j++) acc[j] += f[j];
    }
  }
#pragma unroll
  for (int j = 0; j < V; j++) sh[threadIdx.y][j][threadIdx.x] = acc[j];
  __syncthreads();
  for (int t = threadIdx.y * 32 + threadIdx.x; t < 32 * V; t += 256) {  // the block's column t
    const int c = blockIdx.x * 32 * V + t;
    if (c >= C) continue;
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; k++) sum += sh[k][t % V][t / V];
    partial[size_t(blockIdx.y) * C + c] = sum;
  }
}

__global__ void colsum_finish_kernel(float* dst, const float* partial, int chunks, int C, bool accumulate) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float s = 0.0f;
  for (int k = 0; k < chunks; k++) s += partial[size_t(k) * C + c];
  dst[c] = accumulate ? dst[c] + s : s;
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

size_t sum_squares_spans_plan(SumSqSpan* spans, size_t count) {
  return plan_block_table(spans, count, kSqChunk, &SumSqSpan::first_partial);
}

void sum_squares_spans(double* results, const float* x, const SumSqSpan* spans, size_t count,
                       size_t chunks, double* partials, cudaStream_t s) {
  if (count == 0) return;
  BATON_KCHECK("sum_squares_spans", results != nullptr && spans != nullptr);
  BATON_KCHECK("sum_squares_spans", count < (size_t(1) << 31) && chunks < (size_t(1) << 31));
  if (chunks > 0) {
    BATON_KCHECK("sum_squares_spans", x != nullptr && partials != nullptr);
    sumsq_spans_partial_kernel<<<unsigned(chunks), kSqThreads, 0, s>>>(partials, x, spans, int(count));
    check_launch("sum_squares_spans");
  }
  sumsq_spans_finish_kernel<<<unsigned(count), 1024, 0, s>>>(results, partials, spans);
  check_launch("sum_squares_spans");
}

int column_chunk_rows(int N) {
  // At most 64 chunks, at least 64 rows each.
  return std::max(64, ceil_div(N, 64));
}

size_t column_sum_scratch_floats(int N, int C) {
  return size_t(ceil_div(std::max(N, 1), column_chunk_rows(N))) * size_t(C);
}

template <typename T>
void column_sum_impl(float* dst, const T* x, int N, int C, bool accumulate, float* scratch,
                     size_t scratch_floats, cudaStream_t s) {
  BATON_KCHECK("column_sum", N >= 0 && C > 0);
  if (N == 0) {  // empty sums
    if (!accumulate) check_cuda(cudaMemsetAsync(dst, 0, size_t(C) * sizeof(float), s), "column_sum");
    return;
  }
  BATON_KCHECK("column_sum", dst != nullptr && x != nullptr && scratch != nullptr);
  BATON_KCHECK("column_sum", scratch_floats >= column_sum_scratch_floats(N, C));
  const int rows = column_chunk_rows(N), chunks = ceil_div(N, rows);
  constexpr int V = 16 / sizeof(T);
  const dim3 grid(ceil_div(C, 32 * V), chunks), block(32, 8);
  if (C % V == 0 && aligned16(x))
    colsum_partial_kernel<T, true><<<grid, block, 0, s>>>(scratch, x, N, C, rows);
  else
    colsum_partial_kernel<T, false><<<grid, block, 0, s>>>(scratch, x, N, C, rows);
  check_launch("column_sum");
  colsum_finish_kernel<<<ceil_div(C, 256), 256, 0, s>>>(dst, scratch, chunks, C, accumulate);
  check_launch("column_sum");
}

void column_sum(float* dst, const float* x, int N, int C, bool accumulate, float* scratch,
                size_t scratch_floats, cudaStream_t s) {
  column_sum_impl(dst, x, N, C, accumulate, scratch, scratch_floats, s);
}

void column_sum(float* dst, const __nv_bfloat16* x, int N, int C, bool accumulate, float* scratch,
                size_t scratch_floats, cudaStream_t s) {
  column_sum_impl(dst, x, N, C, accumulate, scratch, scratch_floats, s);
}

}  // namespace baton::kernels
