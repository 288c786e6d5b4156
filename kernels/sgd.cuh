// SGD step with momentum (PyTorch's torch.optim.SGD, dampening 0), fp32, elementwise:
//   g = grad * grad_scale (+ l2 * param);  buf = momentum * buf + g;
//   d = nesterov ? g + momentum * buf : buf (momentum 0: d = g, buf untouched);
//   param -= lr * (d + decoupled * param)
// `l2` is the weight decay added to the gradient (optim.weight_decay_mode = "l2"), `decoupled` the
// one applied to the weights directly (SGDW, Loshchilov & Hutter's decoupled form, scaled by lr
// as PyTorch's AdamW scales it); at most one of them is non-zero.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

namespace baton::kernels {

struct SgdParams {
  float lr, momentum, l2, decoupled, grad_scale;
  int nesterov;
};

void sgd_step(float* param, const float* grad, float* buf, size_t n, const SgdParams& p, cudaStream_t s);

}  // namespace baton::kernels
