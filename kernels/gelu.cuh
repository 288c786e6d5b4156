// GELU, tanh approximation (GPT-2): gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

namespace baton::kernels {
void gelu_forward(float* out, const float* inp, size_t n, cudaStream_t s);
// dinp = gelu'(inp) * dout (overwrites; dinp may alias dout).
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n, cudaStream_t s);
}  // namespace baton::kernels
