// Elementwise fp32 ops on n floats (n may be 0): fill with zero, copy, scale, add, residual;
// and the bf16 residual (fp32 add, one RNE rounding; kernels/cast.cuh has the bf16 rules).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>

namespace baton::kernels {
void zero(float* x, size_t n, cudaStream_t s);
void copy(float* dst, const float* src, size_t n, cudaStream_t s);
void scale(float* x, float a, size_t n, cudaStream_t s);                     // x *= a
void add(float* dst, const float* src, size_t n, cudaStream_t s);            // dst += src
void residual(float* out, const float* a, const float* b, size_t n, cudaStream_t s);  // a + b

using bf16 = __nv_bfloat16;
// out = bf16(float(a) + float(b)); out may alias a or b. 16-byte accesses when all three
// pointers are 16-byte aligned.
void residual_forward(bf16* out, const bf16* a, const bf16* b, size_t n, cudaStream_t s);
}  // namespace baton::kernels
