// fp32 <-> bf16 casts (see cast.cuh): grid-stride over groups of 8 elements; 16-byte bf16
// accesses and two 16-byte float accesses per group when both pointers are 16-byte aligned.
#include "kernels/cast.cuh"
#include "kernels/common.cuh"

namespace baton::kernels {
namespace {

constexpr int kThreads = 256;
int blocks_for_groups(size_t groups) {
  return int(std::min<size_t>((groups + kThreads - 1) / kThreads, 65535u * 8));
}

template <bool kVec>
__global__ void cast_f32_to_bf16_kernel(bf16* dst, const float* src, size_t n) {
  const size_t groups = (n + 7) / 8;
  for (size_t g = blockIdx.x * size_t(blockDim.x) + threadIdx.x; g < groups; g += size_t(gridDim.x) * blockDim.x) {
    const size_t i = g * 8;
    const int valid = n - i < 8 ? int(n - i) : 8;
    float f[8];
    if (kVec && valid == 8) {
      const float4 lo = reinterpret_cast<const float4*>(src + i)[0];
      const float4 hi = reinterpret_cast<const float4*>(src + i)[1];
      f[0] = lo.x, f[1] = lo.y, f[2] = lo.z, f[3] = lo.w;
      f[4] = hi.x, f[5] = hi.y, f[6] = hi.z, f[7] = hi.w;
    } else {
#pragma unroll
      for (int j = 0; j < 8; j++) f[j] = j < valid ? src[i + j] : 0.0f;
    }
    store_group<kVec>(dst + i, pack8(f), valid);
  }
}

template <bool kVec>
__global__ void cast_bf16_to_f32_kernel(float* dst, const bf16* src, size_t n) {
  const size_t groups = (n + 7) / 8;
  for (size_t g = blockIdx.x * size_t(blockDim.x) + threadIdx.x; g < groups; g += size_t(gridDim.x) * blockDim.x) {
    const size_t i = g * 8;
    const int valid = n - i < 8 ? int(n - i) : 8;
    float f[8];
    unpack8(f, load_group<kVec>(src + i, valid));
    if (kVec && valid == 8) {
      reinterpret_cast<float4*>(dst + i)[0] = make_float4(f[0], f[1], f[2], f[3]);
      reinterpret_cast<float4*>(dst + i)[1] = make_float4(f[4], f[5], f[6], f[7]);
    } else {
#pragma unroll
      for (int j = 0; j < 8; j++)
        if (j < valid) dst[i + j] = f[j];
    }
  }
}

}  // namespace

void cast_f32_to_bf16(bf16* dst, const float* src, size_t n, cudaStream_t s) {
  if (n == 0) return;
  BATON_KCHECK("cast_f32_to_bf16", dst != nullptr && src != nullptr);
  const int blocks = blocks_for_groups((n + 7) / 8);
  if (aligned16(dst) && aligned16(src))
    cast_f32_to_bf16_kernel<true><<<blocks, kThreads, 0, s>>>(dst, src, n);
  else
    cast_f32_to_bf16_kernel<false><<<blocks, kThreads, 0, s>>>(dst, src, n);
  check_launch("cast_f32_to_bf16");
}

void cast_bf16_to_f32(float* dst, const bf16* src, size_t n, cudaStream_t s) {
  if (n == 0) return;
  BATON_KCHECK("cast_bf16_to_f32", dst != nullptr && src != nullptr);
  const int blocks = blocks_for_groups((n + 7) / 8);
  if (aligned16(dst) && aligned16(src))
    cast_bf16_to_f32_kernel<true><<<blocks, kThreads, 0, s>>>(dst, src, n);
  else
    cast_bf16_to_f32_kernel<false><<<blocks, kThreads, 0, s>>>(dst, src, n);
  check_launch("cast_bf16_to_f32");
}

}  // namespace baton::kernels
