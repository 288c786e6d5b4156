// The dropout mask as a pure function of (seed, sample row, element): every backend (the CPU loop,
// the CUDA kernel) and every layout (whichever rank or micro-batch holds a sample) draws the same
// mask, and a backward regenerates it instead of storing it. The caller's seed already mixes the
// run's seed, the batch and the layer (model/dropout.h).
#pragma once
#include <cstdint>

#if defined(__NVCC__)  // (not __CUDACC__: the CPU emulator inlines __CUDACC__ blocks)
#define BATON_HOST_DEVICE __host__ __device__
#else
#define BATON_HOST_DEVICE
#endif

namespace baton {

BATON_HOST_DEVICE inline uint64_t dropout_hash(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Elements whose 24-bit uniform draw falls below this are dropped (p · 2^24, rounded down).
BATON_HOST_DEVICE inline uint32_t dropout_threshold(float p) {
  return static_cast<uint32_t>(static_cast<double>(p) * 16777216.0);
}

// Whether element `j` of sample row `row` survives: its 24-bit draw is at least the threshold.
BATON_HOST_DEVICE inline bool dropout_keep(uint64_t seed, uint64_t row, uint64_t j, uint32_t threshold) {
  const uint64_t h = dropout_hash(dropout_hash(seed ^ dropout_hash(row)) ^ j);
  return static_cast<uint32_t>(h >> 40) >= threshold;
}

}  // namespace baton
