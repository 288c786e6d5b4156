// CpuBackend AdamW step (Loshchilov & Hutter 2019, "Decoupled Weight Decay Regularization", Alg.
// 2), with Adam's bias correction (Kingma & Ba 2015, Alg. 1). Per element, with g = grad *
// grad_scale:
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  mhat = m / (1-b1^t);  vhat = v / (1-b2^t)
//   param -= lr * (mhat / (sqrt(vhat) + eps) + wd * param)
// The decay uses the parameter before this step's update, as in llm.c and PyTorch's AdamW.
#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"

namespace baton {
namespace {

struct Coeffs {
  float b1, b2, lr, eps, wd, gs, bc1, bc2;
};

// One piece, on one thread. Built per instruction set like cpu_math.cpp (target_clones; this file
// too without fused multiply-adds, so every CPU computes the bits baseline x86-64 does): the update
// is bound by its division and square root, not by memory — 4-wide SSE2 took 43 ms over GPT-2's
// 91M parameters on 2 AVX-512 cores, 16-wide 27 ms (28 bytes a parameter at ~95 GB/s).
__attribute__((target_clones("avx512f", "avx2", "default"))) void adamw_piece(float* param, const float* grad,
                                                                              float* m, float* v, size_t n,
                                                                              const Coeffs& c) {
#pragma omp simd
  for (size_t i = 0; i < n; i++) {
    const float g = grad[i] * c.gs;
    const float mi = c.b1 * m[i] + (1.0f - c.b1) * g;
    const float vi = c.b2 * v[i] + (1.0f - c.b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float mhat = mi / c.bc1, vhat = vi / c.bc2;
    param[i] -= c.lr * (mhat / (std::sqrt(vhat) + c.eps) + c.wd * param[i]);
  }
}

}  // namespace

void CpuOps::adamw_step(float* param, const float* grad, float* m, float* v, size_t n, const AdamWArgs& a) {
  BATON_ASSERT(a.step >= 1, "adamw_step: step must be 1-based, got {}", a.step);
  // Bias corrections in double: for large t, 1 - b^t in float loses digits.
  const Coeffs c{.b1 = a.beta1, .b2 = a.beta2, .lr = a.lr, .eps = a.eps, .wd = a.weight_decay, .gs = a.grad_scale,
                 .bc1 = float(1.0 - std::pow(double(a.beta1), double(a.step))),
                 .bc2 = float(1.0 - std::pow(double(a.beta2), double(a.step)))};
  constexpr size_t kPiece = 4096;
  const size_t pieces = (n + kPiece - 1) / kPiece;
#pragma omp parallel for schedule(static) if (n >= cpu_detail::kSerialBelow)
  for (size_t k = 0; k < pieces; k++) {
    const size_t lo = k * kPiece;
    adamw_piece(param + lo, grad + lo, m + lo, v + lo, std::min(n - lo, kPiece), c);
  }
}

}  // namespace baton
