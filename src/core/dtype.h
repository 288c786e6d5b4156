// Element types shared by the backends (activations in fp32 or bf16) and the communicators, and
// the host-side bf16 conversions (round to nearest even, as __float2bfloat16_rn on the GPU).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace baton {

enum class DType : uint8_t { F32, F64, I32, I64, BF16, U8 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "fp32", "bf16", ...

inline float bf16_to_f32(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Round to nearest, ties to even; NaN stays a (quiet) NaN, infinities stay infinite.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// x rounded to the nearest bf16 value, as a float.
inline float round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

}  // namespace baton
