// Deterministic reductions (fixed partition and combining order, no atomics): the result depends
// only on the inputs and sizes, never on scheduling.
//   sum_squares: sum of x^2 in double, two stages (per-chunk partials, then one block).
//   column_sum:  dst[c] += sum_n x[n, c] (bias gradients), two stages over fixed row chunks.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>

namespace baton::kernels {

// Doubles of scratch sum_squares needs for n elements (partials + the result).
size_t sum_squares_scratch_doubles(size_t n);
// Writes the sum into *result (device memory, one double; it may be inside `scratch`'s end).
void sum_squares(double* result, const float* x, size_t n, double* scratch, size_t scratch_doubles,
                 cudaStream_t s);

// acc[0] += sum of x[0..n) in double: one block, fixed per-thread strides and a fixed-tree block
// sum (deterministic). For short vectors (a micro-batch's per-token losses).
void accumulate_sum(double* acc, const float* x, size_t n, cudaStream_t s);

// Rows per chunk of the column reductions (a function of N only, so results are reproducible).
int column_chunk_rows(int N);
// Floats of scratch column_sum needs for x[N, C].
size_t column_sum_scratch_floats(int N, int C);
void column_sum(float* dst, const float* x, int N, int C, float* scratch, size_t scratch_floats,
                cudaStream_t s);
// The same over bf16 input (fp32 sums: the bias gradients of the bf16 dense layer).
void column_sum(float* dst, const __nv_bfloat16* x, int N, int C, float* scratch,
                size_t scratch_floats, cudaStream_t s);

}  // namespace baton::kernels
