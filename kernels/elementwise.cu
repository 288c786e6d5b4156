// Elementwise fp32 kernels: grid-stride loops, one element per thread per iteration. The bf16
// residual: grid-stride over groups of 8 elements (16-byte accesses when aligned).
#include "kernels/cast.cuh"
#include "kernels/common.cuh"
#include "kernels/elementwise.cuh"

namespace baton::kernels {
namespace {

constexpr int kThreads = 256;
int blocks_for(size_t n) { return int(std::min<size_t>((n + kThreads - 1) / kThreads, 65535u * 8)); }

__global__ void scale_kernel(float* x, float a, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    x[i] *= a;
}
__global__ void add_kernel(float* dst, const float* src, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dst[i] += src[i];
}
__global__ void residual_kernel(float* out, const float* a, const float* b, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    out[i] = a[i] + b[i];
}

template <bool kVec>
__global__ void residual_bf16_kernel(bf16* out, const bf16* a, const bf16* b, size_t n) {
  const size_t groups = (n + 7) / 8;
  for (size_t g = blockIdx.x * size_t(blockDim.x) + threadIdx.x; g < groups; g += size_t(gridDim.x) * blockDim.x) {
    const size_t i = g * 8;
    const int valid = n - i < 8 ? int(n - i) : 8;
    float x[8], y[8];
    unpack8(x, load_group<kVec>(a + i, valid));
    unpack8(y, load_group<kVec>(b + i, valid));
#pragma unroll
    for (int j = 0; j < 8; j++) x[j] += y[j];
    store_group<kVec>(out + i, pack8(x), valid);
  }
}

}  // namespace

void zero(float* x, size_t n, cudaStream_t s) {
  if (n == 0) return;
  BATON_KCHECK("zero", x != nullptr);
  check_cuda(cudaMemsetAsync(x, 0, n * sizeof(float), s), "zero");
}

void copy(float* dst, const float* src, size_t n, cudaStream_t s) {
  if (n == 0 || dst == src) return;
  BATON_KCHECK("copy", dst != nullptr && src != nullptr);
  check_cuda(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, s), "copy");
}

void scale(float* x, float a, size_t n, cudaStream_t s) {
  if (n == 0) return;
  BATON_KCHECK("scale", x != nullptr);
  scale_kernel<<<blocks_for(n), kThreads, 0, s>>>(x, a, n);
  check_launch("scale");
}

void add(float* dst, const float* src, size_t n, cudaStream_t s) {
  if (n == 0) return;
  BATON_KCHECK("add", dst != nullptr && src != nullptr);
  add_kernel<<<blocks_for(n), kThreads, 0, s>>>(dst, src, n);
  check_launch("add");
}

void residual(float* out, const float* a, const float* b, size_t n, cudaStream_t s) {
  if (n == 0) return;
  BATON_KCHECK("residual", out != nullptr && a != nullptr && b != nullptr);
  residual_kernel<<<blocks_for(n), kThreads, 0, s>>>(out, a, b, n);
  check_launch("residual");
}

void residual_forward(bf16* out, const bf16* a, const bf16* b, size_t n, cudaStream_t s) {
  if (n == 0) return;
  BATON_KCHECK("residual_forward", out != nullptr && a != nullptr && b != nullptr);
  const int blocks = blocks_for((n + 7) / 8);
  if (aligned16(out) && aligned16(a) && aligned16(b))
    residual_bf16_kernel<true><<<blocks, kThreads, 0, s>>>(out, a, b, n);
  else
    residual_bf16_kernel<false><<<blocks, kThreads, 0, s>>>(out, a, b, n);
  check_launch("residual_forward");
}

}  // namespace baton::kernels
