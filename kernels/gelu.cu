// GELU forward/backward (tanh form). tanhf, not a fast-math approximation. The CPU twin computes the
// same function as x sigma(2u) through a vectorised exp (src/backend/cpu/cpu_math.h): the two agree
// to ~3e-7 of the largest value (each is within ~4e-7 of the exact gradient; test_cuda_ops). The bf16 kernels evaluate the same expressions in fp32 on groups of 8
// elements (16-byte accesses when aligned) and round once on the store.
#include "kernels/cast.cuh"
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

// The fp32 kernels' expressions, per element (written out again so the fp32 kernels stay as
// they were).
__device__ __forceinline__ float gelu_value(float x) {
  const float cube = 0.044715f * x * x * x;
  return 0.5f * x * (1.0f + tanhf(kGeluScale * (x + cube)));
}
__device__ __forceinline__ float gelu_grad(float x) {
  const float u = kGeluScale * (x + 0.044715f * x * x * x);
  const float th = tanhf(u);
  const float sech2 = 1.0f - th * th;
  const float du_dx = kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
  return 0.5f * (1.0f + th) + 0.5f * x * sech2 * du_dx;
}

template <bool kVec>
__global__ void gelu_forward_bf16_kernel(bf16* out, const bf16* inp, size_t n) {
  const size_t groups = (n + 7) / 8;
  for (size_t g = blockIdx.x * size_t(blockDim.x) + threadIdx.x; g < groups; g += size_t(gridDim.x) * blockDim.x) {
    const size_t i = g * 8;
    const int valid = n - i < 8 ? int(n - i) : 8;
    float x[8];
    unpack8(x, load_group<kVec>(inp + i, valid));
#pragma unroll
    for (int j = 0; j < 8; j++) x[j] = gelu_value(x[j]);
    store_group<kVec>(out + i, pack8(x), valid);
  }
}

template <bool kVec>
__global__ void gelu_backward_bf16_kernel(bf16* dinp, const bf16* inp, const bf16* dout, size_t n) {
  const size_t groups = (n + 7) / 8;
  for (size_t g = blockIdx.x * size_t(blockDim.x) + threadIdx.x; g < groups; g += size_t(gridDim.x) * blockDim.x) {
    const size_t i = g * 8;
    const int valid = n - i < 8 ? int(n - i) : 8;
    float x[8], dy[8];
    unpack8(x, load_group<kVec>(inp + i, valid));
    unpack8(dy, load_group<kVec>(dout + i, valid));
#pragma unroll
    for (int j = 0; j < 8; j++) x[j] = gelu_grad(x[j]) * dy[j];
    store_group<kVec>(dinp + i, pack8(x), valid);
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

void gelu_forward(bf16* out, const bf16* inp, size_t n, cudaStream_t s) {
  if (n == 0) return;
  BATON_KCHECK("gelu_forward", out != nullptr && inp != nullptr);
  const int blocks = blocks_for((n + 7) / 8);
  if (aligned16(out) && aligned16(inp))
    gelu_forward_bf16_kernel<true><<<blocks, kThreads, 0, s>>>(out, inp, n);
  else
    gelu_forward_bf16_kernel<false><<<blocks, kThreads, 0, s>>>(out, inp, n);
  check_launch("gelu_forward");
}

void gelu_backward(bf16* dinp, const bf16* inp, const bf16* dout, size_t n, cudaStream_t s) {
  if (n == 0) return;
  BATON_KCHECK("gelu_backward", dinp != nullptr && inp != nullptr && dout != nullptr);
  const int blocks = blocks_for((n + 7) / 8);
  if (aligned16(dinp) && aligned16(inp) && aligned16(dout))
    gelu_backward_bf16_kernel<true><<<blocks, kThreads, 0, s>>>(dinp, inp, dout, n);
  else
    gelu_backward_bf16_kernel<false><<<blocks, kThreads, 0, s>>>(dinp, inp, dout, n);
  check_launch("gelu_backward");
}

}  // namespace baton::kernels
