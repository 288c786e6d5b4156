// LayerNorm over the last dimension (eps = 1e-5, biased variance), the fused residual add, and
// the backward. Row statistics mean[N], rstd[N] are saved by the forward for the backward.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

namespace baton::kernels {

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, cudaStream_t s);
// residual = a + b; out = layernorm(residual).
void residual_layernorm_forward(float* residual, float* out, float* mean, float* rstd,
                                const float* a, const float* b, const float* weight,
                                const float* bias, int N, int C, cudaStream_t s);

// Floats of scratch layernorm_backward needs for the parameter gradients of [N, C].
size_t layernorm_backward_scratch_floats(int N, int C);
// dinp[N,C] += ...; dweight[C] += sum_n dout*xhat; dbias[C] += sum_n dout. Each of the three
// outputs may be null (skipped). Deterministic (fixed row chunks, no atomics).
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int N, int C, float* scratch, size_t scratch_floats,
                        cudaStream_t s);

}  // namespace baton::kernels
