// CpuBackend AdamW step (Loshchilov & Hutter 2019, "Decoupled Weight Decay Regularization", Alg.
// 2), with Adam's bias correction (Kingma & Ba 2015, Alg. 1). Per element, with g = grad *
// grad_scale:
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  mhat = m / (1-b1^t);  vhat = v / (1-b2^t)
//   param -= lr * (mhat / (sqrt(vhat) + eps) + wd * param)
// The decay uses the parameter before this step's update, as in llm.c and PyTorch's AdamW.
#include <cmath>

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"

namespace baton {

void CpuOps::adamw_step(float* param, const float* grad, float* m, float* v, size_t n,
                            const AdamWArgs& a) {
  BATON_ASSERT(a.step >= 1, "adamw_step: step must be 1-based, got {}", a.step);
  // Bias corrections in double: for large t, 1 - b^t in float loses digits.
  const float bc1 = float(1.0 - std::pow(double(a.beta1), double(a.step)));
  const float bc2 = float(1.0 - std::pow(double(a.beta2), double(a.step)));
  const float b1 = a.beta1, b2 = a.beta2, lr = a.lr, eps = a.eps, wd = a.weight_decay;
  const float gs = a.grad_scale;
#pragma omp parallel for simd schedule(static) if (n >= cpu_detail::kSerialBelow)
  for (size_t i = 0; i < n; i++) {
    const float g = grad[i] * gs;
    const float mi = b1 * m[i] + (1.0f - b1) * g;
    const float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float mhat = mi / bc1, vhat = vi / bc2;
    param[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + wd * param[i]);
  }
}

}  // namespace baton
