// The CPU backend's CNN ops (oneDNN, backend/cpu/cpu_cnn.h) against naive double-precision
// references written here (forward and every backward output), and their backwards against finite
// differences of the forward: convolution (strides 1 and 2, padding 0 and 1, 1×1, 3×3 and 7×7
// kernels, odd sizes, with and without bias), batch normalization (training statistics, inference
// with given statistics, backward), max and average pooling, ReLU; the weight gradients accumulate
// (+=) and dx is overwritten; the bf16 emulation runs the same ops on rounded inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <vector>

#include "backend/backend.h"
#include <oneapi/dnnl/dnnl.hpp>

#include "backend/cpu/cpu_cnn.h"
#include "core/dropout_mask.h"
#include "core/error.h"
#include "core/rng.h"

namespace baton {
namespace {

using V = std::vector<float>;

V randn(size_t n, uint64_t seed, float scale = 1.0f) {
  Rng rng(seed);
  V v(n);
  for (float& x : v) x = scale * static_cast<float>(rng.normal());
  return v;
}

double worst_rel(const V& got, const std::vector<double>& want) {
  double scale = 1e-6;
  for (double w : want) scale = std::max(scale, std::abs(w));
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]) / scale);
  return worst;
}

// The backend's ops with NCHW arguments and results whatever its image layout (the references
// here are NCHW): activations are converted in before each call and out after it; weights,
// biases and statistics have no layout.
struct Nchw {
  Backend& be;
  V in(const V& v, int N, int C, int H, int W) const {
    V r(v.size());
    be.nchw_to_activations(r.data(), v.data(), N, C, H, W);
    return r;
  }
  V out(const V& v, int N, int C, int H, int W) const {
    V r(v.size());
    be.activations_to_nchw(r.data(), v.data(), N, C, H, W);
    return r;
  }
  void conv_forward(V& y, const V& x, const V& w, const V* b, const Conv2d& c) const {
    V yn(y.size());
    be.conv2d_forward(yn.data(), in(x, c.N, c.C, c.H, c.W).data(), w.data(), b ? b->data() : nullptr, c);
    y = out(yn, c.N, c.K, c.P(), c.Q());
  }
  // dx (may be null) overwritten, dw and db (may be null) accumulated, as the op.
  void conv_backward(V* dx, V* dw, V* db, const V& dy, const V& x, const V& w, const Conv2d& c) const {
    V dxn(x.size(), 7.0f);
    be.conv2d_backward(dx ? dxn.data() : nullptr, dw ? dw->data() : nullptr, db ? db->data() : nullptr,
                       in(dy, c.N, c.K, c.P(), c.Q()).data(), in(x, c.N, c.C, c.H, c.W).data(), w.data(), c);
    if (dx) *dx = out(dxn, c.N, c.C, c.H, c.W);
  }
  void bn_forward(V& y, V& mean, V& var, const V& x, const V& g, const V& b, int N, int C, int HW, float eps,
                  bool training) const {
    V yn(y.size());
    be.batchnorm_forward(yn.data(), mean.data(), var.data(), in(x, N, C, HW, 1).data(), g.data(), b.data(), N, C, HW,
                         eps, training);
    y = out(yn, N, C, HW, 1);
  }
  void bn_backward(V& dx, V& dg, V& db, const V& dy, const V& x, const V& mean, const V& var, const V& g, int N,
                   int C, int HW, float eps) const {
    V dxn(dx.size(), 3.0f);
    be.batchnorm_backward(dxn.data(), dg.data(), db.data(), in(dy, N, C, HW, 1).data(), in(x, N, C, HW, 1).data(),
                          mean.data(), var.data(), g.data(), N, C, HW, eps);
    dx = out(dxn, N, C, HW, 1);
  }
  void pool_forward(V& y, void* ws, const V& x, const Pool2d& p) const {
    V yn(y.size());
    be.pool2d_forward(yn.data(), ws, in(x, p.N, p.C, p.H, p.W).data(), p);
    y = out(yn, p.N, p.C, p.P(), p.Q());
  }
  void pool_backward(V& dx, const V& dy, const void* ws, const Pool2d& p) const {
    V dxn(dx.size(), 9.0f);
    be.pool2d_backward(dxn.data(), in(dy, p.N, p.C, p.P(), p.Q()).data(), ws, p);
    dx = out(dxn, p.N, p.C, p.H, p.W);
  }
};

// ---- references (double) ----
size_t idx4(int a, int b, int c, int d, int B, int C, int D) { return ((size_t(a) * B + b) * C + c) * D + d; }

std::vector<double> conv_ref(const V& x, const V& w, const V* b, const Conv2d& c) {
  std::vector<double> y(size_t(c.N) * c.K * c.P() * c.Q(), 0.0);
  for (int n = 0; n < c.N; ++n)
    for (int k = 0; k < c.K; ++k)
      for (int p = 0; p < c.P(); ++p)
        for (int q = 0; q < c.Q(); ++q) {
          double s = b ? (*b)[k] : 0.0;
          for (int ch = 0; ch < c.C; ++ch)
            for (int r = 0; r < c.R; ++r)
              for (int t = 0; t < c.S; ++t) {
                const int h = p * c.stride - c.pad + r, ww = q * c.stride - c.pad + t;
                if (h < 0 || h >= c.H || ww < 0 || ww >= c.W) continue;
                s += double(x[idx4(n, ch, h, ww, c.C, c.H, c.W)]) * w[idx4(k, ch, r, t, c.C, c.R, c.S)];
              }
          y[idx4(n, k, p, q, c.K, c.P(), c.Q())] = s;
        }
  return y;
}

void conv_bwd_ref(const V& dy, const V& x, const V& w, const Conv2d& c, std::vector<double>& dx,
                  std::vector<double>& dw, std::vector<double>& db) {
  dx.assign(x.size(), 0.0);
  dw.assign(w.size(), 0.0);
  db.assign(size_t(c.K), 0.0);
  for (int n = 0; n < c.N; ++n)
    for (int k = 0; k < c.K; ++k)
      for (int p = 0; p < c.P(); ++p)
        for (int q = 0; q < c.Q(); ++q) {
          const double g = dy[idx4(n, k, p, q, c.K, c.P(), c.Q())];
          db[k] += g;
          for (int ch = 0; ch < c.C; ++ch)
            for (int r = 0; r < c.R; ++r)
              for (int t = 0; t < c.S; ++t) {
                const int h = p * c.stride - c.pad + r, ww = q * c.stride - c.pad + t;
                if (h < 0 || h >= c.H || ww < 0 || ww >= c.W) continue;
                dx[idx4(n, ch, h, ww, c.C, c.H, c.W)] += g * w[idx4(k, ch, r, t, c.C, c.R, c.S)];
                dw[idx4(k, ch, r, t, c.C, c.R, c.S)] += g * x[idx4(n, ch, h, ww, c.C, c.H, c.W)];
              }
        }
}

// Directional finite difference of L(u) = Σ y(u)·r along `dir` (central, step h), in double over
// the fp32 op's outputs.
double fd(const std::function<V(const V&)>& f, const V& u, const V& dir, const V& r, double h) {
  V up = u, um = u;
  for (size_t i = 0; i < u.size(); ++i) up[i] += float(h * dir[i]), um[i] -= float(h * dir[i]);
  const V yp = f(up), ym = f(um);
  double lp = 0, lm = 0;
  for (size_t i = 0; i < r.size(); ++i) lp += double(yp[i]) * r[i], lm += double(ym[i]) * r[i];
  return (lp - lm) / (2 * h);
}
double dot(const V& a, const V& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * b[i];
  return s;
}

const Conv2d kConvs[] = {
    {.N = 2, .C = 3, .H = 7, .W = 6, .K = 4, .R = 3, .S = 3, .stride = 1, .pad = 1},
    {.N = 2, .C = 3, .H = 9, .W = 9, .K = 5, .R = 3, .S = 3, .stride = 2, .pad = 1},
    {.N = 3, .C = 4, .H = 5, .W = 7, .K = 2, .R = 1, .S = 1, .stride = 2, .pad = 0},
    {.N = 2, .C = 3, .H = 15, .W = 13, .K = 4, .R = 7, .S = 7, .stride = 2, .pad = 3},
    {.N = 2, .C = 2, .H = 6, .W = 6, .K = 3, .R = 3, .S = 3, .stride = 1, .pad = 0},
};

TEST(CnnOps, ConvolutionMatchesTheReference) {
  auto be = make_cpu_backend();
  const Nchw ops{*be};
  for (const Conv2d& c : kConvs) {
    SCOPED_TRACE(::testing::Message() << "C" << c.C << " " << c.H << "x" << c.W << " K" << c.K << " " << c.R << "x"
                                      << c.S << " s" << c.stride << " p" << c.pad);
    const V x = randn(size_t(c.N) * c.C * c.H * c.W, 1), w = randn(size_t(c.K) * c.C * c.R * c.S, 2, 0.3f),
            b = randn(size_t(c.K), 3), dy = randn(size_t(c.N) * c.K * c.P() * c.Q(), 4);
    for (bool bias : {true, false}) {
      V y(dy.size());
      ops.conv_forward(y, x, w, bias ? &b : nullptr, c);
      EXPECT_LT(worst_rel(y, conv_ref(x, w, bias ? &b : nullptr, c)), 2e-6) << "bias " << bias;
    }
    std::vector<double> rdx, rdw, rdb;
    conv_bwd_ref(dy, x, w, c, rdx, rdw, rdb);
    // dx overwritten (start from garbage); dw, db accumulate onto what is there.
    V dx(x.size(), 7.0f), dw(w.size(), 0.5f), db(b.size(), -0.25f);
    ops.conv_backward(&dx, &dw, &db, dy, x, w, c);
    for (double& v : rdw) v += 0.5;
    for (double& v : rdb) v -= 0.25;
    EXPECT_LT(worst_rel(dx, rdx), 2e-6);
    EXPECT_LT(worst_rel(dw, rdw), 2e-6);
    EXPECT_LT(worst_rel(db, rdb), 2e-6);
    // Each gradient alone (the others null) is the same.
    V dx2(x.size()), dw2(w.size(), 0.5f);
    ops.conv_backward(&dx2, nullptr, nullptr, dy, x, w, c);
    ops.conv_backward(nullptr, &dw2, nullptr, dy, x, w, c);
    EXPECT_EQ(dx2, dx);
    EXPECT_EQ(dw2, dw);
  }
}

TEST(CnnOps, ConvolutionBackwardIsTheForwardsDerivative) {
  auto be = make_cpu_backend();
  const Nchw ops{*be};
  const Conv2d c = kConvs[1];
  const V x = randn(size_t(c.N) * c.C * c.H * c.W, 11), w = randn(size_t(c.K) * c.C * c.R * c.S, 12, 0.3f),
          b = randn(size_t(c.K), 13), r = randn(size_t(c.N) * c.K * c.P() * c.Q(), 14);
  V dx(x.size()), dw(w.size(), 0.0f), db(b.size(), 0.0f);
  ops.conv_backward(&dx, &dw, &db, r, x, w, c);
  auto y_of = [&](const V& xx, const V& ww, const V& bb) {
    V y(r.size());
    ops.conv_forward(y, xx, ww, &bb, c);
    return y;
  };
  const V ux = randn(x.size(), 15), uw = randn(w.size(), 16), ub = randn(b.size(), 17);
  const double h = 1e-2;  // the forward is linear in each argument: only rounding noise
  EXPECT_NEAR(fd([&](const V& v) { return y_of(v, w, b); }, x, ux, r, h), dot(dx, ux), 1e-3 * std::abs(dot(dx, ux)) + 1e-3);
  EXPECT_NEAR(fd([&](const V& v) { return y_of(x, v, b); }, w, uw, r, h), dot(dw, uw), 1e-3 * std::abs(dot(dw, uw)) + 1e-3);
  EXPECT_NEAR(fd([&](const V& v) { return y_of(x, w, v); }, b, ub, r, h), dot(db, ub), 1e-3 * std::abs(dot(db, ub)) + 1e-3);
}

// 3×3 stride-1 convolutions of 32+ channels (multiples of 16) run as Winograd F(4×4, 3×3) on
// AVX-512 CPUs unless BATON_CPU_CONV=direct, and those of 16 channels too under =winograd
// (cpu_cnn.h); both algorithms match the fp64 reference
// (measured: Winograd 1.0e-6 forward, 1.4e-6 dx; direct 3.9e-7, 6.1e-7), other shapes stay direct, and a bad value
// is an error when the backend is made.
TEST(CnnOps, WinogradWhereItPaysAndTheKnobTakesEffect) {
  struct Env {  // BATON_CPU_CONV for the scope of one choice
    explicit Env(const char* v) { setenv("BATON_CPU_CONV", v, 1); }
    ~Env() { unsetenv("BATON_CPU_CONV"); }
  };
  const Conv2d wide{.N = 2, .C = 32, .H = 9, .W = 7, .K = 48, .R = 3, .S = 3, .stride = 1, .pad = 1};
  const Conv2d narrow{.N = 2, .C = 16, .H = 9, .W = 7, .K = 16, .R = 3, .S = 3, .stride = 1, .pad = 1};
  const Conv2d strided{.N = 2, .C = 32, .H = 9, .W = 7, .K = 32, .R = 3, .S = 3, .stride = 2, .pad = 1};
  // oneDNN's ISA (ONEDNN_MAX_CPU_ISA may lower it: the AVX2 run of this test, tests/CMakeLists.txt).
  const bool avx512 = dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core;
  if (!avx512)
    std::printf("oneDNN runs below AVX-512 here: it has no Winograd kernel, only the direct path is checked\n");
  for (const char* knob : {"direct", "auto", "winograd"}) {
    SCOPED_TRACE(knob);
    const Env env(knob);
    CpuCnn cnn;
    const bool wino = std::string(knob) != "direct" && avx512;
    EXPECT_EQ(cnn.conv2d_kernel(wide).find("wino") != std::string::npos, wino) << cnn.conv2d_kernel(wide);
    EXPECT_EQ(cnn.conv2d_kernel(narrow).find("wino") != std::string::npos, wino && std::string(knob) == "winograd")
        << cnn.conv2d_kernel(narrow);
    EXPECT_EQ(cnn.conv2d_kernel(strided).find("wino"), std::string::npos) << cnn.conv2d_kernel(strided);
    if (avx512) {  // native bf16 convolutions exist from AVX-512 on (baton uses them only with avx512_bf16 / AMX)
      EXPECT_EQ(cnn.conv2d_kernel(wide, true).find("wino"), std::string::npos) << "bf16 has no Winograd kernel";
    }

    auto be = make_cpu_backend();
    const Nchw ops{*be};
    const Conv2d& c = wide;
    const V x = randn(size_t(c.N) * c.C * c.H * c.W, 21), w = randn(size_t(c.K) * c.C * c.R * c.S, 22, 0.1f),
            b = randn(size_t(c.K), 23), dy = randn(size_t(c.N) * c.K * c.P() * c.Q(), 24);
    V y(dy.size());
    ops.conv_forward(y, x, w, &b, c);
    std::vector<double> rdx, rdw, rdb;
    conv_bwd_ref(dy, x, w, c, rdx, rdw, rdb);
    V dx(x.size()), dw(w.size(), 0.0f), db(b.size(), 0.0f);
    ops.conv_backward(&dx, &dw, &db, dy, x, w, c);
    const double ey = worst_rel(y, conv_ref(x, w, &b, c)), edx = worst_rel(dx, rdx), edw = worst_rel(dw, rdw),
                 edb = worst_rel(db, rdb);
    std::printf("%s: forward %.1e, dx %.1e, dw %.1e, db %.1e from fp64 (relative to the largest)\n", knob, ey, edx,
                edw, edb);
    const double limit = wino ? 5e-6 : 2e-6;
    EXPECT_LT(ey, limit);
    EXPECT_LT(edx, limit);
    EXPECT_LT(edw, limit);
    EXPECT_LT(edb, limit);
  }
  const Env bad("fft");
  EXPECT_THROW(make_cpu_backend(), Error);
}

// No convolution of the CNNs' shapes falls to oneDNN's reference kernels (100–200× slower), on
// AVX-512 and — the AVX2 run of this test (tests/CMakeLists.txt) — below it: the 16-channel
// convolutions described as nChw16c (cpu_cnn.cpp) must keep NHWC where no blocked kernel takes it.
TEST(CnnOps, NoConvolutionRunsOnReferenceKernels) {
  for (const char* knob : {"auto", "winograd", "direct"}) {
    setenv("BATON_CPU_CONV", knob, 1);
    CpuCnn cnn;
    unsetenv("BATON_CPU_CONV");
    for (const Conv2d& c : {Conv2d{.N = 4, .C = 1, .H = 28, .W = 28, .K = 16, .R = 3, .S = 3, .stride = 1, .pad = 1},
                            Conv2d{.N = 4, .C = 16, .H = 28, .W = 28, .K = 16, .R = 3, .S = 3, .stride = 1, .pad = 1},
                            Conv2d{.N = 4, .C = 16, .H = 28, .W = 28, .K = 32, .R = 3, .S = 3, .stride = 2, .pad = 1},
                            Conv2d{.N = 4, .C = 16, .H = 28, .W = 28, .K = 32, .R = 1, .S = 1, .stride = 2, .pad = 0},
                            Conv2d{.N = 4, .C = 32, .H = 14, .W = 14, .K = 32, .R = 3, .S = 3, .stride = 1, .pad = 1},
                            Conv2d{.N = 2, .C = 3, .H = 32, .W = 32, .K = 64, .R = 7, .S = 7, .stride = 2, .pad = 3}})
      for (bool bf16 : {false, true}) {
        if (bf16 && dnnl::get_effective_cpu_isa() < dnnl::cpu_isa::avx512_core) continue;  // no bf16 kernels
        const std::string k = cnn.conv2d_kernel(c, bf16);
        EXPECT_EQ(k.find("ref"), std::string::npos)
            << knob << " C" << c.C << " K" << c.K << " " << c.R << "x" << c.S << (bf16 ? " bf16: " : ": ") << k;
      }
  }
}

// ---- batch normalization ----
struct BnRef {
  std::vector<double> y, mean, var, dx, dgamma, dbeta;
};
BnRef bn_ref(const V& x, const V& g, const V& b, const V& dy, int N, int C, int HW, double eps) {
  BnRef o;
  o.y.assign(x.size(), 0);
  o.dx.assign(x.size(), 0);
  o.mean.assign(C, 0);
  o.var.assign(C, 0);
  o.dgamma.assign(C, 0);
  o.dbeta.assign(C, 0);
  const double M = double(N) * HW;
  for (int c = 0; c < C; ++c) {
    auto at = [&](int n, int i) { return (size_t(n) * C + c) * HW + i; };
    double s = 0, ss = 0;
    for (int n = 0; n < N; ++n)
      for (int i = 0; i < HW; ++i) s += x[at(n, i)];
    const double mu = s / M;
    for (int n = 0; n < N; ++n)
      for (int i = 0; i < HW; ++i) ss += (x[at(n, i)] - mu) * (x[at(n, i)] - mu);
    const double var = ss / M, rstd = 1 / std::sqrt(var + eps);
    o.mean[c] = mu;
    o.var[c] = var;
    double sdy = 0, sdyxh = 0;
    for (int n = 0; n < N; ++n)
      for (int i = 0; i < HW; ++i) {
        const double xh = (x[at(n, i)] - mu) * rstd;
        o.y[at(n, i)] = xh * g[c] + b[c];
        sdy += dy[at(n, i)];
        sdyxh += dy[at(n, i)] * xh;
      }
    o.dgamma[c] = sdyxh;
    o.dbeta[c] = sdy;
    for (int n = 0; n < N; ++n)
      for (int i = 0; i < HW; ++i) {
        const double xh = (x[at(n, i)] - mu) * rstd;
        o.dx[at(n, i)] = g[c] * rstd * (dy[at(n, i)] - sdy / M - xh * sdyxh / M);
      }
  }
  return o;
}

TEST(CnnOps, BatchNormTrainingInferenceAndBackward) {
  auto be = make_cpu_backend();
  const Nchw ops{*be};
  const int N = 3, C = 4, HW = 10;
  const float eps = 1e-5f;
  V x = randn(size_t(N) * C * HW, 21);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 2.0f * x[i] + 0.5f * float(i % C);  // per-channel offsets
  const V g = randn(C, 22), b = randn(C, 23), dy = randn(x.size(), 24);
  const BnRef ref = bn_ref(x, g, b, dy, N, C, HW, eps);
  V y(x.size()), mean(C), var(C);
  ops.bn_forward(y, mean, var, x, g, b, N, C, HW, eps, true);
  EXPECT_LT(worst_rel(y, ref.y), 5e-6);
  EXPECT_LT(worst_rel(mean, ref.mean), 5e-6);
  EXPECT_LT(worst_rel(var, ref.var), 5e-6);  // the biased batch variance
  V dx(x.size(), 3.0f), dg(C, 1.0f), dbt(C, -1.0f);
  ops.bn_backward(dx, dg, dbt, dy, x, mean, var, g, N, C, HW, eps);
  std::vector<double> rdg = ref.dgamma, rdb = ref.dbeta;
  for (double& v : rdg) v += 1.0;
  for (double& v : rdb) v -= 1.0;
  EXPECT_LT(worst_rel(dx, ref.dx), 1e-5);
  EXPECT_LT(worst_rel(dg, rdg), 1e-5);
  EXPECT_LT(worst_rel(dbt, rdb), 1e-5);
  // Inference: the given (running) statistics, not the batch's.
  const V rm = {0.1f, -0.2f, 0.3f, 0.0f}, rv = {1.5f, 0.5f, 2.0f, 1.0f};
  V yi(x.size()), rm2 = rm, rv2 = rv;
  ops.bn_forward(yi, rm2, rv2, x, g, b, N, C, HW, eps, false);
  std::vector<double> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const int c = int(i / HW) % C;
    want[i] = (x[i] - rm[c]) / std::sqrt(double(rv[c]) + eps) * g[c] + b[c];
  }
  EXPECT_LT(worst_rel(yi, want), 5e-6);
  EXPECT_EQ(rm2, rm);  // inputs, untouched
  EXPECT_EQ(rv2, rv);
}

// Issue 25 item 1: the statistics over a large batch as accurate as the fp32 inputs allow — the
// fashion ResNet's stem (250 images of 28 × 28: 196,000 values per channel) with activations whose
// mean is large against their spread, as a ReLU'd conv output's is. oneDNN 2.6's kernel (summing the
// values one at a time in fp32) was 3.3e-4 from fp64 on the batch means there; sums in double over
// blocks (cpu_batchnorm.h) are at fp32's rounding of the result.
TEST(CnnOps, BatchNormIsAccurateOverLargeBatches) {
  auto be = make_cpu_backend();
  const Nchw ops{*be};
  const int N = 250, C = 4, HW = 28 * 28;
  const float eps = 1e-5f;
  V x = randn(size_t(N) * C * HW, 41, 0.5f);
  for (size_t i = 0; i < x.size(); ++i) x[i] += 3.0f + float((i / HW) % C);
  V dy = randn(x.size(), 42, 1e-3f);
  for (size_t i = 0; i < x.size(); ++i) dy[i] += 2e-4f * (x[i] - 3.0f);  // a gradient correlated with x
  const V g = randn(C, 43), b = randn(C, 44);
  const BnRef ref = bn_ref(x, g, b, dy, N, C, HW, eps);
  V y(x.size()), mean(C), var(C);
  ops.bn_forward(y, mean, var, x, g, b, N, C, HW, eps, true);
  V dx(x.size()), dg(C, 0.0f), dbt(C, 0.0f);
  ops.bn_backward(dx, dg, dbt, dy, x, mean, var, g, N, C, HW, eps);
  const auto per_channel = [](const V& got, const std::vector<double>& want) {
    double worst = 0;
    for (size_t c = 0; c < got.size(); ++c) worst = std::max(worst, std::abs(got[c] - want[c]) / std::abs(want[c]));
    return worst;
  };
  const double e_mean = per_channel(mean, ref.mean), e_var = per_channel(var, ref.var);
  const double e_dg = per_channel(dg, ref.dgamma), e_db = per_channel(dbt, ref.dbeta);
  const double e_dx = worst_rel(dx, ref.dx), e_y = worst_rel(y, ref.y);
  std::printf("batch norm over %d values per channel, relative to fp64: mean %.1e, var %.1e, y %.1e, dgamma %.1e, "
              "dbeta %.1e, dx %.1e\n", N * HW, e_mean, e_var, e_y, e_dg, e_db, e_dx);
  // Measured: mean 2.6e-8, var 4.3e-8, y 8.2e-8, dgamma 1.2e-6 (the fp32 mean the backward reads),
  // dbeta 4.1e-8, dx 9.0e-8; HEAD's oneDNN kernel: means 4.0e-6 on this input.
  EXPECT_LT(e_mean, 1e-7);
  EXPECT_LT(e_var, 2e-7);
  EXPECT_LT(e_y, 4e-7);
  EXPECT_LT(e_dg, 5e-6);
  EXPECT_LT(e_db, 2e-7);
  EXPECT_LT(e_dx, 4e-7);
}

TEST(CnnOps, BatchNormBackwardIsTheForwardsDerivative) {
  auto be = make_cpu_backend();
  const Nchw ops{*be};
  const int N = 2, C = 3, HW = 6;
  const float eps = 1e-5f;
  const V x = randn(size_t(N) * C * HW, 31), g = randn(C, 32), b = randn(C, 33), r = randn(x.size(), 34);
  V mean(C), var(C), y(x.size());
  ops.bn_forward(y, mean, var, x, g, b, N, C, HW, eps, true);
  V dx(x.size()), dg(C, 0.0f), dbt(C, 0.0f);
  ops.bn_backward(dx, dg, dbt, r, x, mean, var, g, N, C, HW, eps);
  auto y_of = [&](const V& xx, const V& gg) {
    V yy(xx.size()), m(C), v(C);
    ops.bn_forward(yy, m, v, xx, gg, b, N, C, HW, eps, true);
    return yy;
  };
  const V ux = randn(x.size(), 35), ug = randn(C, 36);
  EXPECT_NEAR(fd([&](const V& v) { return y_of(v, g); }, x, ux, r, 1e-3), dot(dx, ux), 2e-3 * std::abs(dot(dx, ux)) + 2e-3);
  EXPECT_NEAR(fd([&](const V& v) { return y_of(x, v); }, g, ug, r, 1e-3), dot(dg, ug), 2e-3 * std::abs(dot(dg, ug)) + 2e-3);
}

// The fused ops (backend.h batchnorm_relu_forward, relu_batchnorm_backward) give the unfused ops'
// bits: batch norm (+ residual) then ReLU, and batch norm's backward of relu_backward's gradient —
// the CPU's fused backward recomputes the ReLU mask from x instead of reading y, so the mask must
// be exactly the forward's (half the values sit below zero: beta 0, gamma ±). In bf16 (emulated)
// the backend runs the unfused ops (the default), checked for the same equality.
TEST(CnnOps, FusedBatchNormReluIsTheUnfusedOps) {
  for (const DType act : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(act));
    auto be = make_cpu_backend(act, CpuBf16::EMULATED);
    const int N = 3, C = 20, HW = 49;  // C not a multiple of the vector width
    const size_t n = size_t(N) * C * HW, es = be->act_size();
    const float eps = 1e-5f;
    const V xf = randn(n, 51), rf = randn(n, 52), dyf = randn(n, 53), g = randn(C, 54), b = randn(C, 55, 0.1f);
    auto act_of = [&](const V& v) {
      std::vector<char> r(v.size() * es);
      be->cast(r.data(), act, v.data(), DType::F32, v.size());
      return r;
    };
    const auto x = act_of(xf), res = act_of(rf), dy = act_of(dyf), gamma = act_of(g), beta = act_of(b);
    for (const bool training : {true, false})
      for (const bool residual : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "training " << training << " residual " << residual);
        std::vector<char> y1(n * es), y2(n * es);
        V m1(C, 0.1f), v1(C, 0.9f), m2 = m1, v2 = v1;
        be->batchnorm_forward(y1.data(), m1.data(), v1.data(), x.data(), gamma.data(), beta.data(), N, C, HW, eps,
                              training);
        if (residual) be->residual_forward(y1.data(), y1.data(), res.data(), n);
        be->relu_forward(y1.data(), y1.data(), n);
        be->batchnorm_relu_forward(y2.data(), m2.data(), v2.data(), x.data(), gamma.data(), beta.data(),
                                   residual ? res.data() : nullptr, N, C, HW, eps, training);
        EXPECT_EQ(y1, y2);
        EXPECT_EQ(m1, m2);
        EXPECT_EQ(v1, v2);
        if (!training || residual) continue;
        size_t zeros = 0;  // +0.0 in either dtype: all bits zero
        for (size_t i = 0; i < n * es; i += es) zeros += std::all_of(&y1[i], &y1[i] + es, [](char c) { return c == 0; });
        EXPECT_GT(zeros, n / 4);
        EXPECT_LT(zeros, 3 * n / 4);
        std::vector<char> g1(n * es), dx1(n * es), dx2(n * es, 7), scratch(n * es);
        V dg1(C, 0.5f), db1(C, -0.5f), dg2 = dg1, db2 = db1;
        be->relu_backward(g1.data(), y1.data(), dy.data(), n);
        be->batchnorm_backward(dx1.data(), dg1.data(), db1.data(), g1.data(), x.data(), m1.data(), v1.data(),
                               gamma.data(), N, C, HW, eps);
        be->relu_batchnorm_backward(dx2.data(), dg2.data(), db2.data(), dy.data(), y1.data(), x.data(), m1.data(),
                                    v1.data(), gamma.data(), beta.data(), N, C, HW, eps, scratch.data());
        EXPECT_EQ(dx1, dx2);
        EXPECT_EQ(dg1, dg2);
        EXPECT_EQ(db1, db2);
      }
  }
}

// ---- pooling and ReLU ----
TEST(CnnOps, PoolingMatchesTheReference) {
  auto be = make_cpu_backend();
  const Nchw ops{*be};
  for (const Pool2d p : {Pool2d{.N = 2, .C = 3, .H = 8, .W = 7, .R = 3, .S = 3, .stride = 2, .pad = 1, .max = true},
                         Pool2d{.N = 2, .C = 3, .H = 6, .W = 6, .R = 2, .S = 2, .stride = 2, .pad = 0, .max = true},
                         Pool2d{.N = 2, .C = 3, .H = 7, .W = 7, .R = 7, .S = 7, .stride = 1, .pad = 0, .max = false},
                         Pool2d{.N = 2, .C = 2, .H = 5, .W = 6, .R = 3, .S = 3, .stride = 2, .pad = 1, .max = false}}) {
    SCOPED_TRACE(::testing::Message() << (p.max ? "max " : "avg ") << p.R << "x" << p.S << " s" << p.stride);
    const V x = randn(size_t(p.N) * p.C * p.H * p.W, 41), dy = randn(size_t(p.N) * p.C * p.P() * p.Q(), 42);
    std::vector<double> ry(dy.size()), rdx(x.size(), 0.0);
    for (int n = 0; n < p.N; ++n)
      for (int c = 0; c < p.C; ++c)
        for (int i = 0; i < p.P(); ++i)
          for (int j = 0; j < p.Q(); ++j) {
            double best = -1e300, sum = 0;
            size_t arg = 0;
            for (int r = 0; r < p.R; ++r)
              for (int s = 0; s < p.S; ++s) {
                const int h = i * p.stride - p.pad + r, w = j * p.stride - p.pad + s;
                if (h < 0 || h >= p.H || w < 0 || w >= p.W) continue;
                const size_t k = idx4(n, c, h, w, p.C, p.H, p.W);
                sum += x[k];
                if (x[k] > best) best = x[k], arg = k;
              }
            const size_t o = idx4(n, c, i, j, p.C, p.P(), p.Q());
            ry[o] = p.max ? best : sum / (p.R * p.S);  // average counts the padding
            for (int r = 0; r < p.R; ++r)
              for (int s = 0; s < p.S; ++s) {
                const int h = i * p.stride - p.pad + r, w = j * p.stride - p.pad + s;
                if (h < 0 || h >= p.H || w < 0 || w >= p.W) continue;
                const size_t k = idx4(n, c, h, w, p.C, p.H, p.W);
                if (!p.max) rdx[k] += dy[o] / (p.R * p.S);
              }
            if (p.max) rdx[arg] += dy[o];
          }
    std::vector<char> ws(be->pool2d_workspace_bytes(p) + 1);
    V y(dy.size()), dx(x.size(), 9.0f);
    ops.pool_forward(y, ws.data(), x, p);
    ops.pool_backward(dx, dy, ws.data(), p);
    EXPECT_LT(worst_rel(y, ry), 1e-6);
    EXPECT_LT(worst_rel(dx, rdx), 1e-6);
  }
}

TEST(CnnOps, ReluAndAxpby) {
  auto be = make_cpu_backend();
  const V x = randn(1000, 51), dy = randn(1000, 52);
  V y(x.size()), dx(x.size());
  be->relu_forward(y.data(), x.data(), x.size());
  be->relu_backward(dx.data(), y.data(), dy.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(y[i], x[i] > 0 ? x[i] : 0.0f);
    EXPECT_EQ(dx[i], x[i] > 0 ? dy[i] : 0.0f);
  }
  V inplace = dy;  // dx may alias dy
  be->relu_backward(inplace.data(), y.data(), inplace.data(), x.size());
  EXPECT_EQ(inplace, dx);
  // NaN stays NaN (PyTorch's relu), and its gradient is 0; -0 and 0 give +0.
  const V odd = {std::nanf(""), -0.0f, 0.0f, -1.0f, 2.0f};
  V oy(odd.size()), od(odd.size()), ody(odd.size(), 1.0f);
  be->relu_forward(oy.data(), odd.data(), odd.size());
  be->relu_backward(od.data(), oy.data(), ody.data(), odd.size());
  EXPECT_TRUE(std::isnan(oy[0]));
  EXPECT_EQ(V(oy.begin() + 1, oy.end()), (V{0.0f, 0.0f, 0.0f, 2.0f}));
  EXPECT_EQ(od, (V{0.0f, 0.0f, 0.0f, 0.0f, 1.0f}));
  V acc = {1, 2, 3};
  const V s = {10, 20, 30};
  be->axpby(acc.data(), 0.1f, s.data(), 0.9f, 3);
  EXPECT_FLOAT_EQ(acc[2], 0.1f * 30 + 0.9f * 3);
}

// The bf16 emulation runs the same ops: outputs within bf16 rounding of the fp32 op on the same
// (rounded) inputs (both backends read them in the same image layout).
TEST(CnnOps, Bf16EmulationFollowsFp32) {
  auto be32 = make_cpu_backend(), be16 = make_cpu_backend(DType::BF16);
  const Conv2d c = kConvs[0];
  V x = randn(size_t(c.N) * c.C * c.H * c.W, 61), w = randn(size_t(c.K) * c.C * c.R * c.S, 62, 0.3f);
  for (float& v : x) v = bf16_to_f32(f32_to_bf16(v));
  for (float& v : w) v = bf16_to_f32(f32_to_bf16(v));
  std::vector<uint16_t> x16(x.size()), w16(w.size()), y16(size_t(c.N) * c.K * c.P() * c.Q());
  for (size_t i = 0; i < x.size(); ++i) x16[i] = f32_to_bf16(x[i]);
  for (size_t i = 0; i < w.size(); ++i) w16[i] = f32_to_bf16(w[i]);
  V y32(y16.size());
  be32->conv2d_forward(y32.data(), x.data(), w.data(), nullptr, c);
  be16->conv2d_forward(y16.data(), x16.data(), w16.data(), nullptr, c);
  for (size_t i = 0; i < y32.size(); ++i) EXPECT_EQ(y16[i], f32_to_bf16(y32[i]));  // one rounding
}

// The CPU backend keeps activations NHWC: element (n, c, h, w) at ((n·H + h)·W + w)·C + c. The
// conversions put it there from NCHW (images fp32, activations in the act dtype) and back.
TEST(CnnOps, ImageLayoutConversions) {
  for (DType t : {DType::F32, DType::BF16}) {
    auto be = make_cpu_backend(t);
    ASSERT_EQ(be->image_layout(), Backend::ImageLayout::NHWC);
    const int N = 2, C = 3, H = 5, W = 4;
    V x(size_t(N) * C * H * W);
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(i);  // exact in bf16 below 256
    const size_t bytes = x.size() * be->act_size();
    std::vector<char> a(bytes), b(bytes), back(bytes), nchw(bytes);
    be->images_to_activations(a.data(), x.data(), N, C, H, W);
    be->cast(nchw.data(), t, x.data(), DType::F32, x.size());
    be->nchw_to_activations(b.data(), nchw.data(), N, C, H, W);
    EXPECT_EQ(a, b);
    be->activations_to_nchw(back.data(), a.data(), N, C, H, W);
    EXPECT_EQ(back, nchw);
    V af(x.size());
    be->cast(af.data(), DType::F32, a.data(), t, x.size());
    for (int n = 0; n < N; ++n)
      for (int c = 0; c < C; ++c)
        for (int h = 0; h < H; ++h)
          for (int w = 0; w < W; ++w)
            EXPECT_EQ(af[((size_t(n) * H + h) * W + w) * C + c], x[idx4(n, c, h, w, C, H, W)]);
  }
}

// Dropout: the mask is a pure function of (seed, row, element) — the same rows give the same mask
// whatever the call's first row; kept values are scaled by 1/(1−p); the fraction dropped is p;
// in place equals out of place; the backward (the same call on gradients) zeroes the same entries.
TEST(CnnOps, DropoutMaskIsAFunctionOfSeedRowAndElement) {
  auto be = make_cpu_backend();
  const int rows = 64, cols = 300;
  const float p = 0.3f;
  const V x = randn(size_t(rows) * cols, 71);
  V y(x.size());
  be->dropout(y.data(), x.data(), rows, cols, p, 99, 1000);
  size_t dropped = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (y[i] == 0.0f) ++dropped;
    else EXPECT_FLOAT_EQ(y[i], x[i] / (1 - p));
  }
  const double frac = double(dropped) / x.size(), sd = std::sqrt(p * (1 - p) / x.size());
  EXPECT_NEAR(frac, p, 5 * sd);
  // Rows 1010..1019 alone: the same values as inside the whole call.
  V part(size_t(10) * cols);
  be->dropout(part.data(), x.data() + size_t(10) * cols, 10, cols, p, 99, 1010);
  EXPECT_TRUE(std::equal(part.begin(), part.end(), y.begin() + size_t(10) * cols));
  V inplace = x;
  be->dropout(inplace.data(), inplace.data(), rows, cols, p, 99, 1000);
  EXPECT_EQ(inplace, y);
  V other(x.size());  // another seed: another mask
  be->dropout(other.data(), x.data(), rows, cols, p, 100, 1000);
  EXPECT_NE(other, y);
  for (size_t i = 0; i < x.size(); ++i)  // the mask check of core/dropout_mask.h, element by element
    EXPECT_EQ(y[i] != 0.0f, dropout_keep(99, 1000 + i / cols, i % cols, dropout_threshold(p)) || x[i] == 0.0f);
}

// Top-1 / top-5 hits against a count of the classes scoring above the target, ties for the target.
TEST(CnnOps, ClassificationHits) {
  auto be = make_cpu_backend();
  const int N = 200, V_ = 10, ld = 12;
  V logits = randn(size_t(N) * ld, 81);
  for (int n = 0; n < N; n += 7) logits[size_t(n) * ld + 3] = logits[size_t(n) * ld + 4];  // ties
  std::vector<int32_t> t(N);
  Rng rng(82);
  for (int& v : t) v = int(rng.below(V_));
  t[5] = -1;  // ignored
  V h1(N), h5(N);
  be->classification_hits(h1.data(), h5.data(), logits.data(), t.data(), N, V_, ld);
  for (int n = 0; n < N; ++n) {
    int above = 0;
    if (t[n] >= 0)
      for (int j = 0; j < V_; ++j) above += logits[size_t(n) * ld + j] > logits[size_t(n) * ld + t[n]];
    EXPECT_EQ(h1[n], t[n] >= 0 && above == 0 ? 1.0f : 0.0f) << n;
    EXPECT_EQ(h5[n], t[n] >= 0 && above < 5 ? 1.0f : 0.0f) << n;
  }
}

}  // namespace
}  // namespace baton
