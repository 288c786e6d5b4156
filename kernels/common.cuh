// Shared helpers of the kernels: launcher precondition checks, CUDA error checks, warp/block
// reductions with a fixed combining order (deterministic: same inputs -> same bits).
// Kernels know pointers, sizes and a stream, never src/ (kernels/README.md).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>

namespace baton::kernels {

// A violated launcher precondition: the caller passed a shape or pointer the kernel cannot take.
[[noreturn]] inline void fail_precondition(const char* op, const char* what) {
  throw std::invalid_argument(std::string(op) + ": precondition failed: " + what);
}
#define BATON_KCHECK(op, cond) \
  do {                         \
    if (!(cond)) ::baton::kernels::fail_precondition(op, #cond); \
  } while (0)

inline void check_cuda(cudaError_t e, const char* op) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string(op) + ": CUDA error: " + cudaGetErrorString(e));
}
// After every launch: a bad configuration is reported here, not at the next synchronisation.
inline void check_launch(const char* op) { check_cuda(cudaGetLastError(), op); }

inline constexpr int ceil_div(long long a, long long b) { return int((a + b - 1) / b); }

// A multi-tensor kernel's table (entries in tensor order, each with its length `n`): sets each
// entry's first block (member `first`) for ceil(n / chunk) blocks per entry and returns the total
// (entry_of_block maps a block back).
template <typename Entry>
size_t plan_block_table(Entry* table, size_t count, size_t chunk, size_t Entry::*first) {
  size_t blocks = 0;
  for (size_t i = 0; i < count; i++) {
    table[i].*first = blocks;
    blocks += (table[i].n + chunk - 1) / chunk;
  }
  return blocks;
}

#ifdef __CUDACC__
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Block-wide reductions for blockDim.x a multiple of 32 (<= 1024); every thread gets the result.
// `scratch` holds 32 values; the call ends with a barrier so it can be reused right away.
template <typename T>
__device__ __forceinline__ T block_sum(T v, T* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T r = lane < nwarps ? scratch[lane] : T(0);
  r = warp_sum(r);
  __syncthreads();
  return r;
}
// Multi-tensor kernels map block b to the entry of a table in tensor order whose chunks it falls in:
// the last entry with (entry.*first) <= b (an empty entry shares its first block with the next
// one and so is never picked). Every thread searches the same ~log2(count) entries (broadcast
// loads), which saves a barrier.
template <typename Entry>
__device__ __forceinline__ Entry entry_of_block(const Entry* table, int count, size_t b, size_t Entry::*first) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (table[mid].*first <= b) lo = mid;
    else hi = mid - 1;
  }
  return table[lo];
}
__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_max(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = lane < nwarps ? scratch[lane] : -INFINITY;
  r = warp_max(r);
  __syncthreads();
  return r;
}
#endif

}  // namespace baton::kernels
