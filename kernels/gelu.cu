// GELU forward/backward (tanh form), the same expression order as the CPU twin
// (src/backend/cpu/cpu_backend.cpp). tanhf, not a fast-math approximation: fp32 agreement with the
// CPU to a few ulp.
#include "kernels/common.cuh"
#include "kernels/gelu.cuh"

namespace baton::kernels {
namespace {

constexpr int kThreads = 256;
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)

__global__ void gelu_forward_kernel(float* out, const float* inp, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float x = inp[i];
    const float cube = 0.044715f * x * x * x;
    out[i] = 0.5f * x * (1.0f + tanhf(kGeluScale * (x + cube)));
  }
}

__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float x = inp[i];
    const float u = kGeluScale * (x + 0.044715f * x * x * x);
    const float th = tanhf(u);
    const float sech2 = 1.0f - th * th;
    const float du_dx = kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
    const float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * du_dx;
    dinp[i] = grad * dout[i];
  }
}

int blocks_for(size_t n) { return int(std::min<size_t>((n + kThreads - 1) / kThreads, 65535u * 8)); }

}  // namespace

void gelu_forward(float* out, const float* inp, size_t n, cudaStream_t s) {
  if (n == 0) return;
  BATON_KCHECK("gelu_forward", out != nullptr && inp != nullptr);
  gelu_forward_kernel<<<blocks_for(n), kThreads, 0, s>>>(out, inp, n);
  check_launch("gelu_forward");
}

void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n, cudaStream_t s) {
  if (n == 0) return;
  BATON_KCHECK("gelu_backward", dinp != nullptr && inp != nullptr && dout != nullptr);
  gelu_backward_kernel<<<blocks_for(n), kThreads, 0, s>>>(dinp, inp, dout, n);
  check_launch("gelu_backward");
}

}  // namespace baton::kernels
