// Precision casts between fp32 and bf16 (n may be 0; dst and src must not overlap), and the bf16
// helpers every bf16 kernel shares (16-byte accesses of 8 bf16, alignment test).
//
// bf16 rules of the kernels (docs/cuda.md): activations and compute weights are bf16 in memory;
// a kernel loads bf16, computes in fp32 and rounds its result to bf16 once when storing
// (round-to-nearest-even, __float2bfloat16_rn); statistics and parameter gradients stay fp32;
// "+=" into bf16 loads bf16, adds in fp32 and rounds once.
//
// Vectorisation: a launcher takes its 16-byte path (8 bf16 per access) when every pointer it
// touches is 16-byte aligned and, for row-shaped data, the row length is a multiple of 8; else it
// runs the scalar kernel, which visits the elements in the same order (same bits).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace baton::kernels {

using bf16 = __nv_bfloat16;

void cast_f32_to_bf16(bf16* dst, const float* src, size_t n, cudaStream_t s);  // RNE, NaN stays NaN
void cast_bf16_to_f32(float* dst, const bf16* src, size_t n, cudaStream_t s);  // exact

// True when p is 16-byte aligned (nullptr counts as aligned: it is never dereferenced).
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

#ifdef __CUDACC__
// The helpers move bits with memcpy and shifts, never through a bf16* or __nv_bfloat162* view of
// a uint4 (C++ strict aliasing); memcpy between registers compiles to plain moves.
__device__ __forceinline__ uint32_t word_of(const uint4& r, int i) {
  return i == 0 ? r.x : i == 1 ? r.y : i == 2 ? r.z : r.w;
}
__device__ __forceinline__ void set_word(uint4& r, int i, uint32_t v) {
  if (i == 0) r.x = v;
  else if (i == 1) r.y = v;
  else if (i == 2) r.z = v;
  else r.w = v;
}
__device__ __forceinline__ float f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
// Unpack a raw 16-byte group (kept in registers by the row kernels) into floats: element 2i is
// the low half of word i (little-endian, as __nv_bfloat162's .x), element 2i+1 the high half.
__device__ __forceinline__ void unpack8(float (&f)[8], const uint4& raw) {
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const uint32_t w = word_of(raw, i);
    f[2 * i] = f32_from_bits(w << 16);
    f[2 * i + 1] = f32_from_bits(w & 0xffff0000u);
  }
}
// The first `valid` (0..8) elements at p, element by element (any alignment); the rest are zero
// bits. Used by the scalar fallbacks so they can share the packed-register code of the fast path.
__device__ __forceinline__ uint4 load8_partial(const bf16* p, int valid) {
  uint16_t b[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
  for (int j = 0; j < 8; j++)
    if (j < valid) memcpy(&b[j], p + j, sizeof(uint16_t));
  uint4 raw;
#pragma unroll
  for (int i = 0; i < 4; i++) set_word(raw, i, uint32_t(b[2 * i]) | (uint32_t(b[2 * i + 1]) << 16));
  return raw;
}
__device__ __forceinline__ uint4 pack8(const float (&f)[8]) {
  uint4 raw;
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    uint32_t u;
    memcpy(&u, &h, sizeof u);
    set_word(raw, i, u);
  }
  return raw;
}
// Store the first `valid` elements of a packed group element by element (any alignment).
__device__ __forceinline__ void store8_partial(bf16* p, const uint4& raw, int valid) {
#pragma unroll
  for (int j = 0; j < 8; j++) {
    if (j >= valid) continue;
    const uint16_t b = uint16_t(word_of(raw, j / 2) >> (16 * (j % 2)));
    memcpy(static_cast<void*>(p + j), &b, sizeof b);
  }
}
// 8 bf16 = 16 bytes as one access (p must be 16-byte aligned).
__device__ __forceinline__ void load8(float (&f)[8], const bf16* p) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);  // a copy: one 16-byte load
  unpack8(f, raw);
}
// A group of `valid` (<= 8) elements at p: one 16-byte access when kVec (the launcher checked the
// alignment) and the group is full, element by element otherwise.
template <bool kVec>
__device__ __forceinline__ uint4 load_group(const bf16* p, int valid) {
  if (kVec && valid == 8) return *reinterpret_cast<const uint4*>(p);
  return load8_partial(p, valid);
}
template <bool kVec>
__device__ __forceinline__ void store_group(bf16* p, const uint4& raw, int valid) {
  if (kVec && valid == 8)
    *reinterpret_cast<uint4*>(p) = raw;
  else
    store8_partial(p, raw, valid);
}
#endif

}  // namespace baton::kernels
