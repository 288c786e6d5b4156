// AdamW kernel: the CPU twin's expression order (cpu_adamw.cpp), IEEE sqrt and division.
#include "kernels/adamw.cuh"
#include "kernels/common.cuh"

namespace baton::kernels {
namespace {

__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, size_t n,
                             AdamWParams p) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float g = grad[i] * p.grad_scale;
    const float mi = p.beta1 * m[i] + (1.0f - p.beta1) * g;
    const float vi = p.beta2 * v[i] + (1.0f - p.beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float mhat = mi / p.bc1, vhat = vi / p.bc2;
    param[i] -= p.lr * (mhat / (sqrtf(vhat) + p.eps) + p.weight_decay * param[i]);
  }
}

}  // namespace

void adamw_step(float* param, const float* grad, float* m, float* v, size_t n,
                const AdamWParams& p, cudaStream_t s) {
  if (n == 0) return;
  BATON_KCHECK("adamw_step", param && grad && m && v);
  BATON_KCHECK("adamw_step", p.bc1 > 0.0f && p.bc2 > 0.0f);
  const int blocks = int(std::min<size_t>((n + 255) / 256, 65535u * 8));
  adamw_kernel<<<blocks, 256, 0, s>>>(param, grad, m, v, n, p);
  check_launch("adamw_step");
}

}  // namespace baton::kernels
