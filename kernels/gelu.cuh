// GELU, tanh approximation (GPT-2): gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// bf16 overloads: load bf16, the fp32 expression, one RNE rounding on the store (16-byte accesses
// when every pointer is 16-byte aligned).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>

namespace baton::kernels {
void gelu_forward(float* out, const float* inp, size_t n, cudaStream_t s);
// dinp = gelu'(inp) * dout (overwrites; dinp may alias dout).
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n, cudaStream_t s);

using bf16 = __nv_bfloat16;
// out = bf16(gelu(float(inp))); out may alias inp.
void gelu_forward(bf16* out, const bf16* inp, size_t n, cudaStream_t s);
// dinp = bf16(gelu'(float(inp)) * float(dout)) (overwrites; dinp may alias inp or dout).
void gelu_backward(bf16* dinp, const bf16* inp, const bf16* dout, size_t n, cudaStream_t s);
}  // namespace baton::kernels
