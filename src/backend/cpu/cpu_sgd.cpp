// CpuBackend SGD step with momentum, as PyTorch's torch.optim.SGD (dampening 0): per element, with
// g = grad * grad_scale + l2 * param (L2 weight decay added to the gradient),
//   buf = momentum * buf + g;   d = nesterov ? g + momentum * buf : buf   (momentum 0: d = g)
//   param -= lr * (d + decoupled * param)       (decoupled weight decay, SGDW)
// PyTorch starts buf at g on the first step; a zero buffer gives the same first update.
#include "backend/cpu/cpu_ops.h"

namespace baton {

void CpuOps::sgd_step(float* param, const float* grad, float* buf, size_t n, const SgdArgs& a) {
  const float lr = a.lr, mom = a.momentum, l2 = a.l2, dec = a.decoupled, gs = a.grad_scale;
  const bool nesterov = a.nesterov;
#pragma omp parallel for simd schedule(static) if (n >= cpu_detail::kSerialBelow)
  for (size_t i = 0; i < n; i++) {
    const float w = param[i];
    float g = grad[i] * gs + l2 * w;
    if (mom != 0.0f) {
      const float b = mom * buf[i] + g;
      buf[i] = b;
      g = nesterov ? g + mom * b : b;
    }
    param[i] = w - lr * (g + dec * w);
  }
}

}  // namespace baton
