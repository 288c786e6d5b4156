// AdamW step (decoupled weight decay, Adam bias correction), fp32, elementwise:
//   g = grad * grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
//   param -= lr * ((m / bc1) / (sqrt(v / bc2) + eps) + wd * param)
// bc1 = 1 - b1^t and bc2 = 1 - b2^t are computed by the caller (in double, then rounded).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

namespace baton::kernels {

struct AdamWParams {
  float lr, beta1, beta2, eps, weight_decay, grad_scale, bc1, bc2;
};

void adamw_step(float* param, const float* grad, float* m, float* v, size_t n,
                const AdamWParams& p, cudaStream_t s);

}  // namespace baton::kernels
