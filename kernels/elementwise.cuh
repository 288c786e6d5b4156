// Elementwise fp32 ops on n floats (n may be 0): fill with zero, copy, scale, add, residual.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

namespace baton::kernels {
void zero(float* x, size_t n, cudaStream_t s);
void copy(float* dst, const float* src, size_t n, cudaStream_t s);
void scale(float* x, float a, size_t n, cudaStream_t s);                     // x *= a
void add(float* dst, const float* src, size_t n, cudaStream_t s);            // dst += src
void residual(float* out, const float* a, const float* b, size_t n, cudaStream_t s);  // a + b
}  // namespace baton::kernels
