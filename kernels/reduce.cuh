// Deterministic reductions (fixed partition and combining order, no atomics): the result depends
// only on the inputs and sizes, never on scheduling.
//   sum_squares: sum of x^2 in double, two stages (per-chunk partials, then one block); over a
//                table of spans, the same two stages for all of them (two launches).
//   column_sum:  dst[c] (+= or =) sum_n x[n, c] (bias gradients), two stages over fixed row chunks; 16-byte
//                loads (4 fp32 / 8 bf16 columns per thread) when C is a multiple of that and x is
//                16-byte aligned, else element-wise in the same order (same bits).
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

// sum_squares over many spans of one buffer in two launches whatever their number (a gradient norm
// reads ~150 tensors): one span per entry, its per-chunk partials at first_partial.
struct SumSqSpan {
  size_t offset = 0;         // the span is x[offset, offset + n)
  size_t n = 0;
  size_t first_partial = 0;  // set by sum_squares_spans_plan: chunks of the spans before it
};
// Sets first_partial of spans[0..count) and returns the partial doubles sum_squares_spans needs.
size_t sum_squares_spans_plan(SumSqSpan* spans, size_t count);
// results[i] = sum_squares(x + spans[i].offset, spans[i].n) — the same bits: the same chunks, the
// same per-thread order and block trees — for every i < count (device memory, as are `spans`, the
// planned table, and `partials`, >= the plan's result doubles; results must not overlap it).
void sum_squares_spans(double* results, const float* x, const SumSqSpan* spans, size_t count,
                       size_t chunks, double* partials, cudaStream_t s);

// acc[0] += sum of x[0..n) in double: one block, fixed per-thread strides and a fixed-tree block
// sum (deterministic). For short vectors (a micro-batch's per-token losses).
void accumulate_sum(double* acc, const float* x, size_t n, cudaStream_t s);

// Rows per chunk of the column reductions (a function of N only, so results are reproducible).
int column_chunk_rows(int N);
// Floats of scratch column_sum needs for x[N, C].
size_t column_sum_scratch_floats(int N, int C);
// accumulate: dst += the sums; else dst = them (old values never read; zeros when N = 0).
void column_sum(float* dst, const float* x, int N, int C, bool accumulate, float* scratch,
                size_t scratch_floats, cudaStream_t s);
// The same over bf16 input (fp32 sums: the bias gradients of the bf16 dense layer).
void column_sum(float* dst, const __nv_bfloat16* x, int N, int C, bool accumulate, float* scratch,
                size_t scratch_floats, cudaStream_t s);

}  // namespace baton::kernels
