// SGD kernel: the CPU twin's expression order (cpu_sgd.cpp).
#include "kernels/common.cuh"
#include "kernels/sgd.cuh"

namespace baton::kernels {
namespace {

__global__ void sgd_kernel(float* param, const float* grad, float* buf, size_t n, SgdParams p) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float w = param[i];
    float g = grad[i] * p.grad_scale + p.l2 * w;
    if (p.momentum != 0.0f) {
      const float b = p.momentum * buf[i] + g;
      buf[i] = b;
      g = p.nesterov ? g + p.momentum * b : b;
    }
    param[i] = w - p.lr * (g + p.decoupled * w);
  }
}

}  // namespace

void sgd_step(float* param, const float* grad, float* buf, size_t n, const SgdParams& p, cudaStream_t s) {
  if (n == 0) return;
  BATON_KCHECK("sgd_step", param && grad && (buf || p.momentum == 0.0f));
  const int blocks = int(std::min<size_t>((n + 255) / 256, 65535u * 8));
  sgd_kernel<<<blocks, 256, 0, s>>>(param, grad, buf, n, p);
  check_launch("sgd_step");
}

}  // namespace baton::kernels
