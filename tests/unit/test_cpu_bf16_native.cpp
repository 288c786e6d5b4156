// Native bf16 on the CPU (issue 25 item 2; backend.h CpuBf16): the oneDNN bf16 matmuls and
// convolutions against fp64 references on the same bf16-rounded inputs, against the emulation, a
// GPT's loss curve against fp32, and the choice of native or emulated (AUTO falls back to the
// emulation on a CPU without bf16, forced here by hiding the CPU's bf16). Tests that run native
// kernels skip on CPUs without avx512_bf16 / amx_bf16.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/device.h"
#include "core/error.h"
#include "core/rng.h"
#include "model/gpt.h"
#include "optim/adamw.h"
#include "../support/gpt_loss_curve.h"

namespace baton {
namespace {

#define SKIP_WITHOUT_BF16()                                                                       \
  if (!cpu_detail::cpu_has_bf16())                                                                \
  GTEST_SKIP() << "this CPU has neither avx512_bf16 nor amx_bf16: native bf16 cannot run here"

std::vector<uint16_t> random_bf16(size_t n, uint64_t seed, float scale) {
  Rng rng(seed);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = f32_to_bf16(scale * rng.normal());
  return v;
}
double f(uint16_t h) { return bf16_to_f32(h); }

// Whether two bf16 results of the same fp32 sum formed in different orders agree: at most one bf16
// ulp (a rounding boundary), or, where cancellation left a value far below the tensor's scale, an
// fp32 summation error of that scale. Counts the values that differ at all.
bool bf16_agree(const std::vector<uint16_t>& x, const std::vector<uint16_t>& y, size_t& differing) {
  double mean = 0;
  for (uint16_t v : y) mean += std::fabs(f(v));
  mean /= double(y.size());
  differing = 0;
  bool ok = true;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] == y[i]) continue;
    ++differing;
    const double a = f(x[i]), b = f(y[i]);
    const bool one_ulp = std::fabs(a - b) <= std::ldexp(std::fabs(b), -7);
    if (!one_ulp && std::fabs(a - b) > 1e-5 * mean) {
      ADD_FAILURE() << "element " << i << ": " << a << " vs " << b;
      ok = false;
    }
  }
  return ok;
}

// |got - want| over a scale that does not vanish where the reference crosses zero: the larger of
// |want| and the mean |reference| of the tensor.
double worst_rel(const std::vector<double>& want, const auto& got_at) {
  double mean = 0;
  for (double w : want) mean += std::fabs(w);
  mean /= double(want.size());
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i)
    worst = std::max(worst, std::fabs(double(got_at(i)) - want[i]) / std::max(std::fabs(want[i]), mean));
  return worst;
}

struct Dense {
  int N = 77, C = 200, OC = 96;  // odd sizes: no full vector blocks anywhere
  std::vector<uint16_t> inp = random_bf16(size_t(N) * C, 1, 1.0f), w = random_bf16(size_t(OC) * C, 2, 0.1f),
                        b = random_bf16(OC, 3, 0.5f), dout = random_bf16(size_t(N) * OC, 4, 1.0f),
                        dinp0 = random_bf16(size_t(N) * C, 5, 1.0f);
  std::vector<float> dw0 = std::vector<float>(size_t(OC) * C, 0.25f), db0 = std::vector<float>(OC, -0.5f);

  // The fp64 reference on the bf16 inputs.
  std::vector<double> out_ref() const {
    std::vector<double> r(size_t(N) * OC);
    for (int n = 0; n < N; ++n)
      for (int o = 0; o < OC; ++o) {
        double s = f(b[o]);
        for (int c = 0; c < C; ++c) s += f(inp[size_t(n) * C + c]) * f(w[size_t(o) * C + c]);
        r[size_t(n) * OC + o] = s;
      }
    return r;
  }
  std::vector<double> dinp_ref(bool acc) const {
    std::vector<double> r(size_t(N) * C);
    for (int n = 0; n < N; ++n)
      for (int c = 0; c < C; ++c) {
        double s = acc ? f(dinp0[size_t(n) * C + c]) : 0.0;
        for (int o = 0; o < OC; ++o) s += f(dout[size_t(n) * OC + o]) * f(w[size_t(o) * C + c]);
        r[size_t(n) * C + c] = s;
      }
    return r;
  }
  std::vector<double> dw_ref() const {
    std::vector<double> r(size_t(OC) * C);
    for (int o = 0; o < OC; ++o)
      for (int c = 0; c < C; ++c) {
        double s = dw0[size_t(o) * C + c];
        for (int n = 0; n < N; ++n) s += f(dout[size_t(n) * OC + o]) * f(inp[size_t(n) * C + c]);
        r[size_t(o) * C + c] = s;
      }
    return r;
  }
  std::vector<double> db_ref() const {
    std::vector<double> r(OC);
    for (int o = 0; o < OC; ++o) {
      double s = db0[o];
      for (int n = 0; n < N; ++n) s += f(dout[size_t(n) * OC + o]);
      r[o] = s;
    }
    return r;
  }

  struct Result {
    std::vector<uint16_t> out, dinp, dinp_acc;
    std::vector<float> dw, db;
  };
  Result run(Backend& be) const {
    Result r{std::vector<uint16_t>(size_t(N) * OC), std::vector<uint16_t>(size_t(N) * C), dinp0, dw0, db0};
    be.matmul_forward(r.out.data(), inp.data(), w.data(), b.data(), N, C, OC);
    be.matmul_backward(r.dinp.data(), r.dw.data(), r.db.data(), dout.data(), inp.data(), w.data(), N, C, OC, false, true);
    be.matmul_backward(r.dinp_acc.data(), nullptr, nullptr, dout.data(), inp.data(), w.data(), N, C, OC, true, true);
    return r;
  }
};

// bf16 outputs carry one rounding (2^-9 relative) on an fp32 sum; fp32 gradients only the fp32
// sum's error (measured: outputs 3.9e-3 relative — the rounding near small values, scaled by the
// mean — and gradients 1e-7). Tolerances a few times those.
TEST(CpuBf16Native, MatmulAgainstFp64) {
  SKIP_WITHOUT_BF16();
  auto be = make_cpu_backend(DType::BF16, CpuBf16::NATIVE);
  const Dense d;
  const auto r = d.run(*be);
  const double out = worst_rel(d.out_ref(), [&](size_t i) { return f(r.out[i]); });
  const double dinp = worst_rel(d.dinp_ref(false), [&](size_t i) { return f(r.dinp[i]); });
  const double dacc = worst_rel(d.dinp_ref(true), [&](size_t i) { return f(r.dinp_acc[i]); });
  const double dw = worst_rel(d.dw_ref(), [&](size_t i) { return r.dw[i]; });
  const double db = worst_rel(d.db_ref(), [&](size_t i) { return r.db[i]; });
  std::printf("native bf16 matmul vs fp64: out %.2e dinp %.2e dinp+= %.2e dweight %.2e dbias %.2e\n", out, dinp,
              dacc, dw, db);
  EXPECT_LT(out, 8e-3);
  EXPECT_LT(dinp, 8e-3);
  EXPECT_LT(dacc, 8e-3);
  EXPECT_LT(dw, 1e-5);
  EXPECT_LT(db, 1e-5);
  // The bias-free forward.
  std::vector<uint16_t> o(size_t(d.N) * d.OC);
  be->matmul_forward(o.data(), d.inp.data(), d.w.data(), nullptr, d.N, d.C, d.OC);
  auto ref = d.out_ref();
  for (int n = 0; n < d.N; ++n)
    for (int k = 0; k < d.OC; ++k) ref[size_t(n) * d.OC + k] -= f(d.b[k]);
  EXPECT_LT(worst_rel(ref, [&](size_t i) { return f(o[i]); }), 8e-3);
}

// Native and emulated round the same fp32 sums, formed in a different order: bf16 results agree
// but for rounding-boundary cases (at most one bf16 ulp, in a few elements), fp32 ones to ~1e-6.
TEST(CpuBf16Native, MatmulAgreesWithEmulation) {
  SKIP_WITHOUT_BF16();
  auto nat = make_cpu_backend(DType::BF16, CpuBf16::NATIVE), emu = make_cpu_backend(DType::BF16, CpuBf16::EMULATED);
  const Dense d;
  const auto a = d.run(*nat), b = d.run(*emu);
  size_t n1, n2, n3;
  EXPECT_TRUE(bf16_agree(a.out, b.out, n1));
  EXPECT_TRUE(bf16_agree(a.dinp, b.dinp, n2));
  EXPECT_TRUE(bf16_agree(a.dinp_acc, b.dinp_acc, n3));
  EXPECT_LT(n1 + n2 + n3, (a.out.size() + 2 * a.dinp.size()) / 20);
  for (size_t i = 0; i < a.dw.size(); ++i) ASSERT_NEAR(a.dw[i], b.dw[i], 1e-5 * (1 + std::fabs(b.dw[i]))) << i;
  for (size_t i = 0; i < a.db.size(); ++i) ASSERT_EQ(a.db[i], b.db[i]) << i;  // the same loop on exact widenings
  std::printf("native vs emulated: %zu + %zu + %zu bf16 values one ulp apart of %zu\n", n1, n2, n3,
              a.out.size() + 2 * a.dinp.size());
}

// A convolution in NHWC (the CPU's image layout), weights OIHW, against fp64 on the bf16 inputs.
void check_conv(const Conv2d& c) {
  SKIP_WITHOUT_BF16();
  auto be = make_cpu_backend(DType::BF16, CpuBf16::NATIVE), emu = make_cpu_backend(DType::BF16, CpuBf16::EMULATED);
  ASSERT_EQ(be->image_layout(), Backend::ImageLayout::NHWC);
  const int P = c.P(), Q = c.Q();
  const size_t nx = size_t(c.N) * c.H * c.W * c.C, ny = size_t(c.N) * P * Q * c.K, nw = size_t(c.K) * c.C * c.R * c.S;
  const auto x = random_bf16(nx, 11, 1.0f), w = random_bf16(nw, 12, 0.2f), bias = random_bf16(c.K, 13, 0.5f),
             dy = random_bf16(ny, 14, 1.0f);
  auto X = [&](int n, int h, int ww, int ch) { return f(x[((size_t(n) * c.H + h) * c.W + ww) * c.C + ch]); };
  auto Wt = [&](int k, int ch, int r, int s) { return f(w[((size_t(k) * c.C + ch) * c.R + r) * c.S + s]); };
  auto DY = [&](int n, int p, int q, int k) { return f(dy[((size_t(n) * P + p) * Q + q) * c.K + k]); };
  std::vector<double> y_ref(ny), dx_ref(nx, 0.0), dw_ref(nw, 1.0), db_ref(c.K, 2.0);
  for (int n = 0; n < c.N; ++n)
    for (int p = 0; p < P; ++p)
      for (int q = 0; q < Q; ++q)
        for (int k = 0; k < c.K; ++k) {
          double s = f(bias[k]);
          const double g = DY(n, p, q, k);
          db_ref[k] += g;
          for (int r = 0; r < c.R; ++r)
            for (int t = 0; t < c.S; ++t) {
              const int h = p * c.stride - c.pad + r, ww = q * c.stride - c.pad + t;
              if (h < 0 || h >= c.H || ww < 0 || ww >= c.W) continue;
              for (int ch = 0; ch < c.C; ++ch) {
                s += X(n, h, ww, ch) * Wt(k, ch, r, t);
                dx_ref[((size_t(n) * c.H + h) * c.W + ww) * c.C + ch] += g * Wt(k, ch, r, t);
                dw_ref[((size_t(k) * c.C + ch) * c.R + r) * c.S + t] += g * X(n, h, ww, ch);
              }
            }
          y_ref[((size_t(n) * P + p) * Q + q) * c.K + k] = s;
        }
  struct Out {
    std::vector<uint16_t> y, dx;
    std::vector<float> dw, db;
  };
  auto run = [&](Backend& b) {
    Out o{std::vector<uint16_t>(ny), std::vector<uint16_t>(nx), std::vector<float>(nw, 1.0f),
          std::vector<float>(c.K, 2.0f)};
    b.conv2d_forward(o.y.data(), x.data(), w.data(), bias.data(), c);
    b.conv2d_backward(o.dx.data(), o.dw.data(), o.db.data(), dy.data(), x.data(), w.data(), c);
    return o;
  };
  const Out a = run(*be), e = run(*emu);
  const double ey = worst_rel(y_ref, [&](size_t i) { return f(a.y[i]); });
  const double edx = worst_rel(dx_ref, [&](size_t i) { return f(a.dx[i]); });
  const double edw = worst_rel(dw_ref, [&](size_t i) { return a.dw[i]; });
  const double edb = worst_rel(db_ref, [&](size_t i) { return a.db[i]; });
  std::printf("native bf16 conv %dx%d/%d vs fp64: y %.2e dx %.2e dw %.2e db %.2e\n", c.R, c.S, c.stride, ey, edx,
              edw, edb);
  EXPECT_LT(ey, 8e-3);
  EXPECT_LT(edx, 8e-3);
  EXPECT_LT(edw, 1e-5);
  EXPECT_LT(edb, 1e-5);
  // ...and against the emulation (fp32 oneDNN on the widened tensors): one bf16 ulp at most.
  size_t n1, n2;
  EXPECT_TRUE(bf16_agree(a.y, e.y, n1));
  EXPECT_TRUE(bf16_agree(a.dx, e.dx, n2));
  for (size_t i = 0; i < nw; ++i) ASSERT_NEAR(a.dw[i], e.dw[i], 1e-5 * (1 + std::fabs(e.dw[i]))) << i;
}

TEST(CpuBf16Native, Conv3x3AgainstFp64) { check_conv(Conv2d{.N = 2, .C = 24, .H = 9, .W = 9, .K = 40, .R = 3, .S = 3, .stride = 1, .pad = 1}); }
TEST(CpuBf16Native, Conv1x1Stride2AgainstFp64) {
  check_conv(Conv2d{.N = 3, .C = 16, .H = 8, .W = 8, .K = 32, .R = 1, .S = 1, .stride = 2, .pad = 0});
}
TEST(CpuBf16Native, Conv7x7Stride2ThreeChannels) {  // a ResNet stem: C = 3
  check_conv(Conv2d{.N = 2, .C = 3, .H = 20, .W = 20, .K = 16, .R = 7, .S = 7, .stride = 2, .pad = 3});
}

// A GPT trained natively follows fp32 within the emulation's tolerance (test_mixed_precision's
// LossCurveFollowsFp32For50Steps: 2% at every step, 1% at the end).
std::vector<double> train_curve(DType act, CpuBf16 mode, int steps) {
  auto be = make_cpu_backend(act, mode);
  return test::small_gpt_loss_curve(*be, steps);
}

TEST(CpuBf16Native, GptLossCurveFollowsFp32For50Steps) {
  SKIP_WITHOUT_BF16();
  const auto f32 = train_curve(DType::F32, CpuBf16::EMULATED, 50), nat = train_curve(DType::BF16, CpuBf16::NATIVE, 50);
  double worst = 0;
  for (size_t i = 0; i < f32.size(); ++i) {
    const double rel = std::fabs(nat[i] - f32[i]) / f32[i];
    worst = std::max(worst, rel);
    EXPECT_LT(rel, 2e-2) << "step " << i + 1 << ": fp32 " << f32[i] << " native bf16 " << nat[i];
  }
  EXPECT_LT(std::fabs(nat.back() - f32.back()) / f32.back(), 1e-2);
  EXPECT_LT(nat.back(), 0.75 * nat.front());
  EXPECT_GT(worst, 1e-6);  // really bf16
  // Deterministic: the same run again gives the same bits.
  const auto again = train_curve(DType::BF16, CpuBf16::NATIVE, 8);
  for (size_t i = 0; i < again.size(); ++i) EXPECT_EQ(again[i], nat[i]) << "step " << i + 1;
  std::printf("native bf16 vs fp32 over 50 steps: worst relative loss difference %.2e, final %.4f vs %.4f\n", worst,
              nat.back(), f32.back());
}

// The choice: AUTO is native exactly where the CPU has bf16; hidden, AUTO runs the emulation (bit
// for bit) and NATIVE is refused; the default (the GPU tests' reference) is always the emulation.
TEST(CpuBf16Native, AutoFallsBackToEmulationWithoutCpuBf16) {
  const bool has = cpu_detail::cpu_has_bf16();
  EXPECT_EQ(make_cpu_backend(DType::BF16, CpuBf16::AUTO)->name(), has ? "cpu (bf16 native)" : "cpu (bf16 emulated)");
  EXPECT_EQ(make_cpu_backend(DType::BF16)->name(), "cpu (bf16 emulated)");
  EXPECT_EQ(make_cpu_backend(DType::F32, CpuBf16::AUTO)->name(), "cpu");

  cpu_detail::hide_cpu_bf16(true);
  ASSERT_FALSE(cpu_detail::cpu_has_bf16());
  auto fallback = make_cpu_backend(DType::BF16, CpuBf16::AUTO);
  EXPECT_EQ(fallback->name(), "cpu (bf16 emulated)");
  EXPECT_THROW(make_cpu_backend(DType::BF16, CpuBf16::NATIVE), Error);
  const Dense d;
  auto emu = make_cpu_backend(DType::BF16, CpuBf16::EMULATED);
  const auto a = d.run(*fallback), b = d.run(*emu);
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.dinp, b.dinp);
  EXPECT_EQ(a.dinp_acc, b.dinp_acc);
  EXPECT_EQ(a.dw, b.dw);
  // choose_backend (what runs use) reads BATON_CPU_BF16; unset it is AUTO.
  unsetenv("BATON_CPU_BF16");
  EXPECT_EQ(choose_backend("cpu", DType::BF16).backend->name(), "cpu (bf16 emulated)");
  cpu_detail::hide_cpu_bf16(false);
  EXPECT_EQ(cpu_detail::cpu_has_bf16(), has);
}

TEST(CpuBf16Native, EnvironmentKnob) {
  const bool has = cpu_detail::cpu_has_bf16();
  setenv("BATON_CPU_BF16", "emulated", 1);
  EXPECT_EQ(choose_backend("cpu", DType::BF16).backend->name(), "cpu (bf16 emulated)");
  EXPECT_NE(choose_backend("cpu", DType::BF16).note.find("emulated"), std::string::npos);
  setenv("BATON_CPU_BF16", "auto", 1);
  EXPECT_EQ(choose_backend("cpu", DType::BF16).backend->name(), has ? "cpu (bf16 native)" : "cpu (bf16 emulated)");
  setenv("BATON_CPU_BF16", "native", 1);
  if (has)
    EXPECT_EQ(choose_backend("cpu", DType::BF16).backend->name(), "cpu (bf16 native)");
  else
    EXPECT_THROW(choose_backend("cpu", DType::BF16), Error);
  EXPECT_EQ(choose_backend("cpu", DType::F32).backend->name(), "cpu");  // fp32 ignores it
  setenv("BATON_CPU_BF16", "fast", 1);
  EXPECT_THROW(choose_backend("cpu", DType::BF16), Error);
  unsetenv("BATON_CPU_BF16");
  EXPECT_THROW(parse_cpu_bf16("Native", "x"), Error);
}

}  // namespace
}  // namespace baton
