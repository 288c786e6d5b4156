// cpu_math.h's functions on 16-float vectors, built per instruction set (target_clones) with
// -ffp-contract=off (src/backend/CMakeLists.txt): the same bits on every CPU.
#include "backend/cpu/cpu_math.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/dtype.h"

namespace baton::cpu_math {
namespace {

using f32v = float __attribute__((vector_size(64)));
using i32v = int32_t __attribute__((vector_size(64)));
constexpr size_t kLanes = sizeof(f32v) / sizeof(float);

[[gnu::always_inline]] inline f32v splat(float v) {
  f32v r;
  for (size_t i = 0; i < kLanes; ++i) r[i] = v;
  return r;
}
[[gnu::always_inline]] inline f32v clamp(f32v x, float lo, float hi) {
  x = x < splat(lo) ? splat(lo) : x;
  return x > splat(hi) ? splat(hi) : x;
}

// e^x = 2^k e^r: x = k ln2 + r by Cody-Waite reduction (|r| <= ln2/2, ln2 split so that k ln2_hi is
// exact), e^r by its Taylor polynomial to r^7 (truncation below 1e-8 relative), 2^k through the
// exponent bits. Outside [-87, 88] x is clamped (e^-87 ~ 1.6e-38, e^88 ~ 1.7e38).
[[gnu::always_inline]] inline f32v exp_v(f32v x) {
  x = clamp(x, -87.0f, 88.0f);
  // round(x / ln2) by the 1.5 * 2^23 trick (no rounding instruction on baseline x86-64).
  const f32v kf = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const f32v r = (x - kf * 0.693359375f) + kf * 2.12194440e-4f;
  f32v p = splat(1.0f / 5040.0f);
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const i32v bits = (__builtin_convertvector(kf, i32v) + 127) << 23;
  return p * (f32v)bits;  // GCC: a cast between vectors of one size keeps the bits
}

// GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), written
// as x sigma(2u) = x / (1 + e^(-2u)) — the same function without tanh's cancellation for x << 0.
// The exponent is capped at 80 (e^80 ~ 5.5e34): below x ~ -8.6 the result is x e^-80, not ~0.
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
[[gnu::always_inline]] inline f32v gelu_v(f32v x) {
  const f32v u = kGeluScale * (x + 0.044715f * x * x * x);
  return x / (1.0f + exp_v(clamp(-2.0f * u, -1e30f, 80.0f)));
}
// d gelu / dx: with e = e^(-2u) and s = sigma(2u) = 1 / (1 + e), 0.5 (1 + tanh u) = s and
// sech^2 u = 4 s (1 - s), where 1 - s = e s (no cancellation when s is near 1).
[[gnu::always_inline]] inline f32v gelu_grad_v(f32v x) {
  const f32v u = kGeluScale * (x + 0.044715f * x * x * x);
  const f32v e = exp_v(clamp(-2.0f * u, -1e30f, 80.0f));
  const f32v s = 1.0f / (1.0f + e);
  const f32v du_dx = kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
  return s + 2.0f * x * s * (e * s) * du_dx;
}

// One vector of `in` (times `in2`) into `out`; len < kLanes (a tail) on a copy padded with 0 (in2
// with 1), through the same code.
[[gnu::always_inline]] inline void gelu_block(float* out, const float* in, const float* in2, size_t len, bool grad) {
  f32v x = splat(0.0f), z = splat(1.0f);
  std::memcpy(&x, in, len * sizeof(float));
  if (in2) std::memcpy(&z, in2, len * sizeof(float));
  const f32v y = grad ? gelu_grad_v(x) * z : gelu_v(x);
  std::memcpy(out, &y, len * sizeof(float));
}

// The serial loop, one clone per instruction set (GCC lowers the 16-float vectors to 4 SSE, 2 AVX
// or 1 AVX-512 operation). The helpers above are always inlined: a call would run the default
// (SSE2) code inside every clone.
__attribute__((target_clones("avx512f", "avx2", "default")))
void gelu_span(float* out, const float* in, const float* in2, size_t n, bool grad) {
  const size_t full = n / kLanes;
  for (size_t b = 0; b < full; ++b)
    gelu_block(out + kLanes * b, in + kLanes * b, in2 ? in2 + kLanes * b : nullptr, kLanes, grad);
  if (n > kLanes * full)
    gelu_block(out + kLanes * full, in + kLanes * full, in2 ? in2 + kLanes * full : nullptr, n - kLanes * full, grad);
}

__attribute__((target_clones("avx512f", "avx2", "default")))
void widen_span(float* dst, const uint16_t* src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}
__attribute__((target_clones("avx512f", "avx2", "default")))
void narrow_span(uint16_t* dst, const float* src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

// Sums in double over 16 fixed lanes — lane j adds the values of elements 16 i + j in order, then
// the lanes are combined in a fixed tree — with elementwise vector arithmetic only, so every
// instruction set gives the same bits (an OpenMP simd reduction's order follows the vector width).
// Two 8-double vectors, not one of 16: GCC converts 16 floats to 16 doubles element by element
// (2.4x slower).
using f32v8 = float __attribute__((vector_size(32)));
using f64v8 = double __attribute__((vector_size(64)));
struct LaneSum {
  f64v8 lo = {}, hi = {};
  // Adds a block of kLanes values (squared when `square`).
  [[gnu::always_inline]] void add(f32v v, bool square) {
    f32v8 a, c;
    std::memcpy(&a, &v, sizeof a);
    std::memcpy(&c, reinterpret_cast<const char*>(&v) + sizeof a, sizeof c);
    const f64v8 da = __builtin_convertvector(a, f64v8), dc = __builtin_convertvector(c, f64v8);
    lo += square ? da * da : da;
    hi += square ? dc * dc : dc;
  }
  // Adds the products a · b, formed in double.
  [[gnu::always_inline]] void add_products(f32v a, f32v b) {
    f32v8 a0, a1, b0, b1;
    std::memcpy(&a0, &a, sizeof a0);
    std::memcpy(&a1, reinterpret_cast<const char*>(&a) + sizeof a0, sizeof a1);
    std::memcpy(&b0, &b, sizeof b0);
    std::memcpy(&b1, reinterpret_cast<const char*>(&b) + sizeof b0, sizeof b1);
    lo += __builtin_convertvector(a0, f64v8) * __builtin_convertvector(b0, f64v8);
    hi += __builtin_convertvector(a1, f64v8) * __builtin_convertvector(b1, f64v8);
  }
  // Adds one value of a tail to lane j (< kLanes).
  [[gnu::always_inline]] void add_at(size_t j, double d) {
    if (j < kLanes / 2)
      lo[j] += d;
    else
      hi[j - kLanes / 2] += d;
  }
  [[gnu::always_inline]] double total() {
    f64v8 s = lo + hi;
    for (size_t w = kLanes / 4; w >= 1; w /= 2)
      for (size_t j = 0; j < w; ++j) s[j] += s[j + w];
    return s[0];
  }
};

__attribute__((target_clones("avx512f", "avx2", "default")))
double sum_squares_span(const float* x, size_t n) {
  LaneSum sum;
  const size_t full = n / kLanes;
  for (size_t b = 0; b < full; ++b) {
    f32v v;
    std::memcpy(&v, x + kLanes * b, sizeof v);
    sum.add(v, true);
  }
  for (size_t i = kLanes * full; i < n; ++i) sum.add_at(i - kLanes * full, double(x[i]) * double(x[i]));
  return sum.total();
}

// span(at, len) over [0, n) in pieces of kPiece (a multiple of kLanes, so only the last piece of a
// GELU has a tail), across the OpenMP threads from 2^15 values up.
constexpr size_t kPiece = size_t(1) << 12;
template <class Span>
void over_pieces(size_t n, Span span) {
  const size_t pieces = (n + kPiece - 1) / kPiece;
  const auto piece = [&](size_t c) { span(c * kPiece, std::min(kPiece, n - c * kPiece)); };
  if (n < (size_t(1) << 15)) {
    for (size_t c = 0; c < pieces; ++c) piece(c);
  } else {
#pragma omp parallel for schedule(static)
    for (size_t c = 0; c < pieces; ++c) piece(c);
  }
}

float lane0(float x, f32v (*f)(f32v)) { return f(splat(x))[0]; }

}  // namespace

float exp_approx(float x) { return lane0(x, exp_v); }
float gelu(float x) { return lane0(x, gelu_v); }
float gelu_grad(float x) { return lane0(x, gelu_grad_v); }

void gelu_map(float* out, const float* in, const float* in2, size_t n, bool grad) {
  if (!grad) in2 = nullptr;
  over_pieces(n, [&](size_t at, size_t len) { gelu_span(out + at, in + at, in2 ? in2 + at : nullptr, len, grad); });
}

void gelu_map_bf16(uint16_t* out, const uint16_t* in, const uint16_t* in2, size_t n, bool grad) {
  over_pieces(n, [&](size_t at, size_t len) {
    alignas(64) float x[kPiece], z[kPiece];
    widen_span(x, in + at, len);
    if (grad) widen_span(z, in2 + at, len);
    gelu_span(x, x, grad ? z : nullptr, len, grad);
    narrow_span(out + at, x, len);
  });
}

void widen_bf16(float* dst, const uint16_t* src, size_t n) {
  over_pieces(n, [&](size_t at, size_t len) { widen_span(dst + at, src + at, len); });
}

void narrow_bf16(uint16_t* dst, const float* src, size_t n) {
  over_pieces(n, [&](size_t at, size_t len) { narrow_span(dst + at, src + at, len); });
}

__attribute__((target_clones("avx512f", "avx2", "default")))
float max_of(const float* x, size_t n) {
  float m = x[0];
  const size_t full = n / kLanes;
  if (full > 0) {
    f32v acc;
    std::memcpy(&acc, x, sizeof acc);
    for (size_t b = 1; b < full; ++b) {
      f32v v;
      std::memcpy(&v, x + kLanes * b, sizeof v);
      acc = acc < v ? v : acc;  // std::max's rule, lane by lane
    }
    for (size_t j = 0; j < kLanes; ++j) m = std::max(m, acc[j]);
  }
  for (size_t i = kLanes * full; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

__attribute__((target_clones("avx512f", "avx2", "default")))
double exp_sum(float* out, const float* x, size_t n, float shift) {
  LaneSum sum;
  const size_t full = n / kLanes;
  for (size_t b = 0; b < full; ++b) {
    f32v v;
    std::memcpy(&v, x + kLanes * b, sizeof v);  // read before out (which may be x) is written
    const f32v e = exp_v(v - shift);
    if (out) std::memcpy(out + kLanes * b, &e, sizeof e);
    sum.add(e, false);
  }
  for (size_t i = kLanes * full; i < n; ++i) {
    const float e = exp_v(splat(x[i] - shift))[0];
    if (out) out[i] = e;
    sum.add_at(i - kLanes * full, e);
  }
  return sum.total();
}

__attribute__((target_clones("avx512f", "avx2", "default")))
double exp_sum_scaled(float* out, const float* x, size_t n, float shift, float scale) {
  LaneSum sum;
  const size_t full = n / kLanes;
  for (size_t b = 0; b < full; ++b) {
    f32v v;
    std::memcpy(&v, x + kLanes * b, sizeof v);  // read before out (which may be x) is written
    const f32v e = exp_v((v - shift) * scale);
    std::memcpy(out + kLanes * b, &e, sizeof e);
    sum.add(e, false);
  }
  for (size_t i = kLanes * full; i < n; ++i) {
    const float e = exp_v(splat((x[i] - shift) * scale))[0];
    out[i] = e;
    sum.add_at(i - kLanes * full, e);
  }
  return sum.total();
}

__attribute__((target_clones("avx512f", "avx2", "default")))
double dot(const float* x, const float* y, size_t n) {
  LaneSum sum;
  const size_t full = n / kLanes;
  for (size_t b = 0; b < full; ++b) {
    f32v u, v;
    std::memcpy(&u, x + kLanes * b, sizeof u);
    std::memcpy(&v, y + kLanes * b, sizeof v);
    sum.add_products(u, v);
  }
  for (size_t i = kLanes * full; i < n; ++i) sum.add_at(i - kLanes * full, double(x[i]) * double(y[i]));
  return sum.total();
}

__attribute__((target_clones("avx512f", "avx2", "default")))
void exp_scale(float* out, const float* x, size_t n, float shift, float scale) {
  const size_t full = n / kLanes;
  for (size_t b = 0; b < full; ++b) {
    f32v v;
    std::memcpy(&v, x + kLanes * b, sizeof v);
    const f32v e = exp_v(v - shift) * scale;
    std::memcpy(out + kLanes * b, &e, sizeof e);
  }
  for (size_t i = kLanes * full; i < n; ++i) out[i] = exp_v(splat(x[i] - shift))[0] * scale;
}

double sum_squares(const float* x, size_t n) {
  const size_t pieces = (n + kPiece - 1) / kPiece;
  std::vector<double> partial(pieces);
  over_pieces(n, [&](size_t at, size_t len) { partial[at / kPiece] = sum_squares_span(x + at, len); });
  double total = 0.0;
  for (double s : partial) total += s;
  return total;
}

}  // namespace baton::cpu_math
