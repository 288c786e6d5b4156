// Float math for the CPU backend's elementwise loops, written on 4-float vectors (GCC's vector
// extension: SSE2 on baseline x86-64, the same lanes wider hardware runs too). glibc's expf and
// tanhf are calls no loop vectorises (their SIMD variants are declared only under -ffast-math), and
// GPT-2's GELU spent as long in tanhf as its GEMM did (the op-time table: matmul_gelu_forward at
// half matmul_forward's TFLOP/s, GPT-2 124M shapes). Plain scalar code of the same formulas does not
// vectorise either: GCC threads the clamps' branches through the constants they produce. Every
// element, a loop's tail included, goes through the same vector code, so results do not depend on
// where an element falls (thread count, tensor-parallel split).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace baton::cpu_math {

using f32x4 = float __attribute__((vector_size(16)));
using i32x4 = int32_t __attribute__((vector_size(16)));

inline f32x4 splat(float v) { return f32x4{v, v, v, v}; }
inline f32x4 clamp(f32x4 x, float lo, float hi) {
  x = x < splat(lo) ? splat(lo) : x;
  return x > splat(hi) ? splat(hi) : x;
}

// e^x for x in [-87, 88] within 2 ulp of the correctly rounded value (test_cpu_ops checks every
// 1e-3 step): x = k ln2 + r by Cody-Waite reduction (|r| <= ln2/2, ln2 split so that k ln2_hi is
// exact), e^r by its Taylor polynomial to r^7 (truncation below 1e-8 relative), 2^k through the
// exponent bits. Outside the range x is clamped (e^-87 ~ 1.6e-38, e^88 ~ 1.7e38): no inf, no
// denormals.
inline f32x4 exp4(f32x4 x) {
  x = clamp(x, -87.0f, 88.0f);
  // round(x / ln2) by the 1.5 * 2^23 trick (no rounding instruction on baseline x86-64).
  const f32x4 kf = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const f32x4 r = (x - kf * 0.693359375f) + kf * 2.12194440e-4f;
  f32x4 p = splat(1.0f / 5040.0f);
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const i32x4 bits = (__builtin_convertvector(kf, i32x4) + 127) << 23;
  return p * (f32x4)bits;  // GCC: a cast between vectors of one size keeps the bits
}

// GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), written
// as x sigma(2u) = x / (1 + e^(-2u)) — the same function without tanh's cancellation for x << 0.
// The exponent is capped at 80 (e^80 ~ 5.5e34): below x ~ -8.6 the result is x e^-80, not ~0.
inline constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
inline f32x4 gelu4(f32x4 x) {
  const f32x4 u = kGeluScale * (x + 0.044715f * x * x * x);
  return x / (1.0f + exp4(clamp(-2.0f * u, -1e30f, 80.0f)));
}
// d gelu / dx: with e = e^(-2u) and s = sigma(2u) = 1 / (1 + e), 0.5 (1 + tanh u) = s and
// sech^2 u = 4 s (1 - s), where 1 - s = e s (no cancellation when s is near 1).
inline f32x4 gelu_grad4(f32x4 x) {
  const f32x4 u = kGeluScale * (x + 0.044715f * x * x * x);
  const f32x4 e = exp4(clamp(-2.0f * u, -1e30f, 80.0f));
  const f32x4 s = 1.0f / (1.0f + e);
  const f32x4 du_dx = kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
  return s + 2.0f * x * s * (e * s) * du_dx;
}

// One element through the vector code (lane 0): the scalar form the tests compare against.
inline float exp_approx(float x) { return exp4(splat(x))[0]; }
inline float gelu(float x) { return gelu4(splat(x))[0]; }
inline float gelu_grad(float x) { return gelu_grad4(splat(x))[0]; }

// f on 4 floats of `in` (times `in2` when not null) into `out`; len < 4 (a loop's tail) through the
// same code on a copy padded with 0 (in2 with 1).
template <class F>
inline void map4_block(float* out, const float* in, const float* in2, size_t len, F f) {
  f32x4 x = splat(0.0f), z = splat(1.0f);
  std::memcpy(&x, in, len * sizeof(float));
  if (in2) std::memcpy(&z, in2, len * sizeof(float));
  const f32x4 y = in2 ? f(x) * z : f(x);
  std::memcpy(out, &y, len * sizeof(float));
}

// f over n floats, 4 at a time, the last n % 4 padded (map4_block). out may equal in or in2.
// Threads from 2^15 floats up; `serial` for callers already inside a parallel loop (an OpenMP
// region, even of one thread, costs microseconds: per piece of a chunked loop it adds up).
template <class F>
inline void map4(float* out, const float* in, const float* in2, size_t n, F f, bool serial = false) {
  const size_t full = n / 4;
  const auto block = [&](size_t b) { map4_block(out + 4 * b, in + 4 * b, in2 ? in2 + 4 * b : nullptr, 4, f); };
  if (serial || n < (size_t(1) << 15)) {
    for (size_t b = 0; b < full; ++b) block(b);
  } else {
#pragma omp parallel for schedule(static)
    for (size_t b = 0; b < full; ++b) block(b);
  }
  if (n > 4 * full) map4_block(out + 4 * full, in + 4 * full, in2 ? in2 + 4 * full : nullptr, n - 4 * full, f);
}

}  // namespace baton::cpu_math
