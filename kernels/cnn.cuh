// The small kernels of the CNN ops (issue 12): ReLU, the convolution bias and its gradient, batch
// norm's inverse standard deviation, and axpby. The convolutions, batch norm and pooling
// themselves are cuDNN's (src/backend/cuda/cudnn_ops.cpp); these are the elementwise and
// per-channel pieces around them. n / N / K / PQ / C may be 0 (nothing to do).
// bf16 overloads (activations): load bf16, compute in fp32, round once on the store
// (kernels/cast.cuh); parameter gradients and statistics are fp32.
// Deterministic: no atomics; every reduction has a fixed partition and order.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>

namespace baton::kernels {
using bf16 = __nv_bfloat16;

// y = x > 0 ? x : 0, NaN stays NaN (as PyTorch's relu); y may alias x. Exact in bf16 (a selection).
void relu_forward(float* y, const float* x, size_t n, cudaStream_t s);
void relu_forward(bf16* y, const bf16* x, size_t n, cudaStream_t s);
// dx = y > 0 ? dy : 0 (y the forward's output); dx may alias dy.
void relu_backward(float* dx, const float* y, const float* dy, size_t n, cudaStream_t s);
void relu_backward(bf16* dx, const bf16* y, const bf16* dy, size_t n, cudaStream_t s);

// y = a * x + b * y, fp32 (batch norm's running statistics). y is read even when b == 0.
void axpby(float* y, float a, const float* x, float b, size_t n, cudaStream_t s);

// y[N,K,PQ] += bias[K] (NCHW, PQ = P*Q): the convolution bias after cuDNN's convolution.
void conv_bias_forward(float* y, const float* bias, int N, int K, int PQ, cudaStream_t s);
void conv_bias_forward(bf16* y, const bf16* bias, int N, int K, int PQ, cudaStream_t s);
// db[K] += sum over n and pq of dy[N,K,PQ]: one block per channel, fp32 sums in a fixed order.
void conv_bias_backward(float* db, const float* dy, int N, int K, int PQ, cudaStream_t s);
void conv_bias_backward(float* db, const bf16* dy, int N, int K, int PQ, cudaStream_t s);

// inv_std[C] = 1 / sqrt(var[C] + eps) (IEEE sqrt and division): what cuDNN's batch norm
// backward takes as its "saved inverse variance" (it is the inverse standard deviation).
void batchnorm_inv_std(float* inv_std, const float* var, float eps, int C, cudaStream_t s);
}  // namespace baton::kernels
