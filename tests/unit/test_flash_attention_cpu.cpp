// The CPU twin of the flash-attention kernels (src/backend/cpu/cpu_flash_attention.h) against a
// naive double-precision causal attention written here, which materialises P[T,T] (Vaswani et al.
// 2017 §3.2.1 with GPT's mask; backward by the softmax Jacobian). Shapes include T = 1, T not a
// multiple of the 64-row tile and HS 64 and 32.
//
// Tolerance: |twin - ref| <= 1e-5 |ref| + 1e-5 max|ref| per tensor. The twin is fp32 and sums in
// another association than the reference (online softmax rescaling per key tile, P recomputed from
// the saved logsumexp in the backward); with ~N(0,1) scores its rounding is a few ulp of fp32
// (2^-24 = 6e-8) times sqrt of the summation lengths (HS <= 64, T <= 200), i.e. ~1e-6 relative: the
// tolerance leaves a 10x margin and would catch any algorithmic slip (a missed rescale, a
// wrong mask or tile boundary is >= 1e-3).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backend/cpu/cpu_flash_attention.h"
#include "core/rng.h"

namespace baton {
namespace {

struct Shape {
  int B, T, NH, HS;
};
std::string name(const Shape& s) {
  return "B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " NH=" + std::to_string(s.NH) +
         " HS=" + std::to_string(s.HS);
}

// T = 1; T below, at, just above and well above the tile (64); HS 64 and 32.
const std::vector<Shape> kShapes = {{1, 1, 1, 64},   {2, 1, 3, 32},  {1, 37, 2, 64},
                                    {2, 64, 2, 32},  {1, 65, 1, 64}, {2, 130, 3, 64},
                                    {1, 200, 2, 32}, {3, 129, 1, 32}};

std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.0f) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = scale * rng.normal();
  return v;
}

// Naive causal attention in double, materialising P. Same layouts as the twin.
struct Reference {
  std::vector<double> out, lse, dqkv;
};
Reference reference(const std::vector<float>& qkv, const std::vector<float>& dout, int B, int T,
                    int C, int NH) {
  const int HS = C / NH;
  const size_t C3 = size_t(3) * C;
  const double scale = 1.0 / std::sqrt(double(HS));
  Reference r;
  r.out.assign(size_t(B) * T * C, 0.0);
  r.lse.assign(size_t(B) * NH * T, 0.0);
  r.dqkv.assign(size_t(B) * T * C3, 0.0);
  std::vector<double> P(size_t(T) * T), dP(size_t(T) * T);
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      auto q = [&](int t, int d) { return double(qkv[(size_t(b) * T + t) * C3 + h * HS + d]); };
      auto k = [&](int t, int d) { return double(qkv[(size_t(b) * T + t) * C3 + C + h * HS + d]); };
      auto v = [&](int t, int d) {
        return double(qkv[(size_t(b) * T + t) * C3 + 2 * C + h * HS + d]);
      };
      auto dO = [&](int t, int d) { return double(dout[(size_t(b) * T + t) * C + h * HS + d]); };
      auto dq = [&](int t, int d) -> double& {
        return r.dqkv[(size_t(b) * T + t) * C3 + h * HS + d];
      };
      auto dk = [&](int t, int d) -> double& {
        return r.dqkv[(size_t(b) * T + t) * C3 + C + h * HS + d];
      };
      auto dv = [&](int t, int d) -> double& {
        return r.dqkv[(size_t(b) * T + t) * C3 + 2 * C + h * HS + d];
      };
      for (int t = 0; t < T; t++) {
        double mx = -std::numeric_limits<double>::infinity();
        for (int j = 0; j <= t; j++) {
          double s = 0;
          for (int d = 0; d < HS; d++) s += q(t, d) * k(j, d);
          P[size_t(t) * T + j] = s * scale;
          mx = std::max(mx, s * scale);
        }
        double sum = 0;
        for (int j = 0; j <= t; j++) sum += std::exp(P[size_t(t) * T + j] - mx);
        for (int j = 0; j <= t; j++)
          P[size_t(t) * T + j] = std::exp(P[size_t(t) * T + j] - mx) / sum;
        r.lse[(size_t(b) * NH + h) * T + t] = mx + std::log(sum);
        for (int d = 0; d < HS; d++) {
          double o = 0;
          for (int j = 0; j <= t; j++) o += P[size_t(t) * T + j] * v(j, d);
          r.out[(size_t(b) * T + t) * C + h * HS + d] = o;
        }
      }
      // dP = dO V^T; dS = P o (dP - rowsum(P o dP)) * scale; dQ = dS K, dK = dS^T Q, dV = P^T dO.
      for (int t = 0; t < T; t++) {
        double rowdot = 0;
        for (int j = 0; j <= t; j++) {
          double s = 0;
          for (int d = 0; d < HS; d++) s += dO(t, d) * v(j, d);
          dP[size_t(t) * T + j] = s;
          rowdot += P[size_t(t) * T + j] * s;
        }
        for (int j = 0; j <= t; j++) {
          const double p = P[size_t(t) * T + j];
          const double ds = p * (dP[size_t(t) * T + j] - rowdot) * scale;
          for (int d = 0; d < HS; d++) {
            dq(t, d) += ds * k(j, d);
            dk(j, d) += ds * q(t, d);
            dv(j, d) += p * dO(t, d);
          }
        }
      }
    }
  }
  return r;
}

struct Tol {
  double rtol, atol;
};
constexpr Tol kTight{1e-5, 1e-5};

// |got - ref| <= rtol |ref| + atol max|ref| for the elements of `got` selected by `pick`.
template <typename Pick>
void expect_close(const std::vector<float>& got, const std::vector<double>& ref, Tol tol,
                  const std::string& what, Pick pick) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  double maxabs = 0;
  for (size_t i = 0; i < ref.size(); i++)
    if (pick(i)) maxabs = std::max(maxabs, std::fabs(ref[i]));
  // Scale floor: at T = 1, dq and dk are analytically zero (dP - D = 0); the inputs are N(0,1).
  maxabs = std::max(maxabs, 1e-2);
  size_t bad = 0, first = 0, n = 0;
  double worst = 0;
  for (size_t i = 0; i < ref.size(); i++) {
    if (!pick(i)) continue;
    n++;
    const double d = std::fabs(double(got[i]) - ref[i]);
    worst = std::max(worst, std::isnan(d) ? INFINITY : d);
    if (!(d <= tol.rtol * std::fabs(ref[i]) + tol.atol * maxabs)) {  // catches NaN
      if (bad++ == 0) first = i;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << n << " out of tolerance (first at "
                     << first << ": got " << got[first] << " ref " << ref[first] << "), worst diff "
                     << worst << ", max|ref| " << maxabs;
}
void expect_close(const std::vector<float>& got, const std::vector<double>& ref, Tol tol,
                  const std::string& what) {
  expect_close(got, ref, tol, what, [](size_t) { return true; });
}
// The q, k or v column block (part 0, 1, 2) of a [B,T,3C] tensor.
void expect_close_qkv(const std::vector<float>& got, const std::vector<double>& ref, int C, Tol tol,
                      const std::string& what) {
  const char* names[3] = {"dq", "dk", "dv"};
  for (int part = 0; part < 3; part++)
    expect_close(got, ref, tol, what + " " + names[part],
                 [&](size_t i) { return int((i % (size_t(3) * C)) / C) == part; });
}

struct TwinRun {
  std::vector<float> qkv, dout, out, lse, dqkv;
};
// The twin forward then backward on random inputs; outputs prefilled with NaN (every element must
// be written).
TwinRun run_twin(const Shape& s, uint64_t seed, float qk_scale = 1.0f) {
  const int C = s.NH * s.HS;
  TwinRun r;
  r.qkv = randn(size_t(s.B) * s.T * 3 * C, seed);
  for (size_t i = 0; i < r.qkv.size(); i++)
    if ((i % (size_t(3) * C)) < size_t(2) * C) r.qkv[i] *= qk_scale;  // q and k
  r.dout = randn(size_t(s.B) * s.T * C, seed + 1);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  r.out.assign(size_t(s.B) * s.T * C, nan);
  r.lse.assign(size_t(s.B) * s.NH * s.T, nan);
  r.dqkv.assign(r.qkv.size(), nan);
  cpu_flash_attention_forward(r.out.data(), r.lse.data(), r.qkv.data(), s.B, s.T, C, s.NH);
  cpu_flash_attention_backward(r.dqkv.data(), r.dout.data(), r.out.data(), r.qkv.data(),
                               r.lse.data(), s.B, s.T, C, s.NH);
  return r;
}

TEST(FlashAttentionCpu, ForwardMatchesNaiveAttention) {
  uint64_t seed = 100;
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(name(s));
    const int C = s.NH * s.HS;
    TwinRun r = run_twin(s, seed += 10);
    Reference ref = reference(r.qkv, r.dout, s.B, s.T, C, s.NH);
    expect_close(r.out, ref.out, kTight, "out");
    expect_close(r.lse, ref.lse, kTight, "lse");
  }
}

TEST(FlashAttentionCpu, BackwardMatchesMaterialisedBackward) {
  uint64_t seed = 200;
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(name(s));
    const int C = s.NH * s.HS;
    TwinRun r = run_twin(s, seed += 10);
    Reference ref = reference(r.qkv, r.dout, s.B, s.T, C, s.NH);
    expect_close_qkv(r.dqkv, ref.dqkv, C, kTight, "dqkv");
  }
}

// FlashAttention-2 §3.1.1/§3.1.2: the forward saves only the logsumexp, O(T) per (b, h) row block
// instead of the O(T^2) P; the backward from (Q, K, V, O, dO, lse) alone reproduces the
// materialised backward. Here the backward gets fresh exactly-sized copies of those inputs and
// nothing else of the forward, and its output buffer is poisoned.
TEST(FlashAttentionCpu, BackwardNeedsOnlyTheLogsumexp) {
  const Shape s{2, 100, 2, 64};
  const int C = s.NH * s.HS;
  TwinRun r = run_twin(s, 7);
  // Saved state: B*NH*T floats (O(T) per row block), vs B*NH*T*T for the materialised P.
  ASSERT_EQ(r.lse.size(), size_t(s.B) * s.NH * s.T);
  const std::vector<float> qkv = r.qkv, dout = r.dout, out = r.out, lse = r.lse;
  std::vector<float> dqkv(qkv.size(), std::numeric_limits<float>::quiet_NaN());
  cpu_flash_attention_backward(dqkv.data(), dout.data(), out.data(), qkv.data(), lse.data(), s.B,
                               s.T, C, s.NH);
  Reference ref = reference(qkv, dout, s.B, s.T, C, s.NH);
  expect_close_qkv(dqkv, ref.dqkv, C, kTight, "dqkv from (q, k, v, o, do, lse)");
  // And the saved lse is the softmax normaliser: P = exp(S - lse) sums to 1 over j <= t.
  const int HS = s.HS;
  for (int b = 0; b < s.B; b++)
    for (int h = 0; h < s.NH; h++)
      for (int t = 0; t < s.T; t++) {
        double sum = 0;
        for (int j = 0; j <= t; j++) {
          double sc = 0;
          for (int d = 0; d < HS; d++)
            sc += double(qkv[(size_t(b) * s.T + t) * 3 * C + h * HS + d]) *
                  double(qkv[(size_t(b) * s.T + j) * 3 * C + C + h * HS + d]);
          sum += std::exp(sc / std::sqrt(double(HS)) - lse[(size_t(b) * s.NH + h) * s.T + t]);
        }
        ASSERT_NEAR(sum, 1.0, 1e-5) << "b=" << b << " h=" << h << " t=" << t;
      }
}

// Scores far beyond exp's fp32 range (q, k scaled by 12: |s| up to ~1000): the online softmax
// subtracts the running max, so nothing overflows. Tolerance 1e-4: an fp32 score of magnitude ~100
// carries an absolute rounding error ~100 * 6e-8 * sqrt(HS) ~ 5e-5, which exp turns into the same
// relative error of P.
TEST(FlashAttentionCpu, LargeScoresStayFinite) {
  const Shape s{1, 150, 2, 32};
  const int C = s.NH * s.HS;
  TwinRun r = run_twin(s, 11, 12.0f);
  for (float x : r.out) ASSERT_TRUE(std::isfinite(x));
  for (float x : r.lse) ASSERT_TRUE(std::isfinite(x));
  for (float x : r.dqkv) ASSERT_TRUE(std::isfinite(x));
  Reference ref = reference(r.qkv, r.dout, s.B, s.T, C, s.NH);
  constexpr Tol kLarge{1e-4, 1e-4};
  expect_close(r.out, ref.out, kLarge, "out");
  expect_close(r.lse, ref.lse, kLarge, "lse");
  expect_close_qkv(r.dqkv, ref.dqkv, C, kLarge, "dqkv");
}

// Same inputs twice -> identical bits (one owner per output tile, fixed order).
TEST(FlashAttentionCpu, Deterministic) {
  const Shape s{2, 97, 3, 32};
  TwinRun a = run_twin(s, 5), b = run_twin(s, 5);
  EXPECT_EQ(0, std::memcmp(a.out.data(), b.out.data(), a.out.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(a.dqkv.data(), b.dqkv.data(), a.dqkv.size() * sizeof(float)));
}

}  // namespace
}  // namespace baton
