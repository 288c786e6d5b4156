// Float math for the CPU backend's elementwise loops (implementation: cpu_math.cpp). glibc's expf and
// tanhf are calls no loop vectorises (their SIMD variants are declared only under -ffast-math), and
// GPT-2's GELU spent as long in tanhf as its GEMM did (the op-time table: matmul_gelu_forward at
// half matmul_forward's TFLOP/s, GPT-2 124M shapes). Plain scalar code of the same formulas does not
// vectorise either: GCC threads the clamps' branches through the constants they produce. So the
// functions are written on 16-float vectors (GCC's vector extension) and built for AVX-512, AVX2 and
// baseline x86-64 (SSE2), picked at load time — with the same operations in the same order and no
// fused multiply-adds (cpu_math.cpp is built with -ffp-contract=off), every element gets the same
// bits on every CPU, wherever it falls (lane, tail, thread count, tensor-parallel split).
#pragma once
#include <cstddef>
#include <cstdint>

namespace baton::cpu_math {

// e^x for x in [-87, 88] within 2 ulp of the correctly rounded value (test_cpu_ops checks every
// 1e-3 step); clamped outside (no inf, no denormals). One element through the vector code.
float exp_approx(float x);
// GELU, tanh approximation (GPT-2), and its derivative; one element through the vector code.
float gelu(float x);
float gelu_grad(float x);

// out = gelu(in) (grad = false) or gelu'(in) · in2 (grad = true; in2 = the output's gradient) over n
// floats; out may equal in or in2. Threads from 2^15 values up (every function here).
void gelu_map(float* out, const float* in, const float* in2, size_t n, bool grad);
// The same on bf16 tensors: per element widen, gelu_map's arithmetic, narrow (the CPU's bf16
// emulation's bits), a piece at a time through buffers that stay in L1 instead of three passes over
// fp32 copies of the whole tensors (a GPT-2 bf16 step spent ~7% of its time in GELU's copies).
void gelu_map_bf16(uint16_t* out, const uint16_t* in, const uint16_t* in2, size_t n, bool grad);

// bf16 <-> fp32 over n values with core/dtype.h's conversions (the same bits), built per instruction
// set like the GELU: baseline x86-64 has no unsigned 32 -> 16-bit pack, and a GPT-2 bf16 step spent
// 5% of its time refreshing the bf16 weights at half the memory bandwidth.
void widen_bf16(float* dst, const uint16_t* src, size_t n);
void narrow_bf16(uint16_t* dst, const float* src, size_t n);

// Σ x² in double, in fixed pieces and lanes summed in a fixed order: the same bits for any thread
// count and instruction set (the gradient norm; 3x the baseline loop's speed on AVX-512).
double sum_squares(const float* x, size_t n);

// Softmax rows (serial: the caller's rows are its parallelism). exp_sum: out[i] = exp_approx(x[i] -
// shift) (out nullable; out == x allowed) and Σ of those in double, its order fixed as sum_squares'
// (16 lanes, a fixed tree), the same bits on every CPU. exp_scale: out[i] = exp_approx(x[i] - shift)
// · scale. A GPT-2 step's cross-entropy over 50257 classes took 33 ms with glibc's expf and a
// one-chain double sum.
double exp_sum(float* out, const float* x, size_t n, float shift);
// The largest of x[0..n), n ≥ 1 (max is exact: any order gives the same value for non-NaN x).
float max_of(const float* x, size_t n);
void exp_scale(float* out, const float* x, size_t n, float shift, float scale);
// Attention's softmax rows (cpu_attention.cpp), in exp_sum's order: exp_sum_scaled: out[i] =
// exp_approx((x[i] - shift) · scale) and their sum; dot: Σ x[i]·y[i], each product and the sum in
// double. The scalar loops they replace (glibc's expf, one float dependency chain) took most of a
// T = 1024 attention's non-GEMM time.
double exp_sum_scaled(float* out, const float* x, size_t n, float shift, float scale);
double dot(const float* x, const float* y, size_t n);

}  // namespace baton::cpu_math
