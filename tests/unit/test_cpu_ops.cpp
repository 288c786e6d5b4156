// Tests of the CPU reference backend (src/backend/cpu). Every op is compared with an independent,
// naive double-precision reference written here, and every backward with central differences of
// that double reference (DESIGN §7: finite-difference gradient check of every op).
//
// Tolerances, and why:
// - kTol = 1e-5, normwise relative (max|got - want| / max|want|), float op vs double truth.
//   The float ops round at ~6e-8 per operation and sum at most a few hundred terms here; the
//   observed errors are 3e-8..4e-7, so 1e-5 leaves a 25x margin yet catches any wrong term (a
//   missing, doubled or mis-scaled term moves the result by 1e-3 or more).
// - Finite differences run on the double reference, never on the float op: with step h = 1e-5 the
//   truncation error (~h^2) and the rounding error (~1e-16 / h) are both ~1e-10, far below kTol,
//   so a gradient mismatch can only be the op's fault. (Differencing the float op instead would
//   need h ~ 1e-2 and a 1e-2 tolerance, which hides real bugs.)
// Shapes are small and odd on purpose (N=7, C=12, OC=5; B=2, T=5, C=8, NH=2, ...) so edge handling
// is exercised; a few larger ones cover the multi-tile and multi-thread paths. Runtime ~1-2 s.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_math.h"
#include "backend/cpu/cpu_ops.h"
#include "core/dtype.h"
#include "core/error.h"

namespace baton {
namespace {

constexpr double kTol = 1e-5;
constexpr double kFdStep = 1e-5;

using VecF = std::vector<float>;
using VecD = std::vector<double>;

VecF random_vec(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  VecF v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

VecD to_d(const VecF& v) { return VecD(v.begin(), v.end()); }

// Normwise relative error of a float result against double truth.
double rel_err(const float* got, const VecD& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); i++) {
    num = std::max(num, std::abs(double(got[i]) - want[i]));
    den = std::max(den, std::abs(want[i]));
  }
  return den == 0 ? num : num / den;
}
double rel_err(const VecF& got, const VecD& want) {
  EXPECT_EQ(got.size(), want.size());
  return rel_err(got.data(), want);
}

// Central differences, in double, of a scalar loss with respect to every element of x.
VecD fd_grad(const std::function<double(const VecD&)>& loss, VecD x) {
  VecD g(x.size());
  for (size_t i = 0; i < x.size(); i++) {
    const double x0 = x[i];
    x[i] = x0 + kFdStep;
    const double lp = loss(x);
    x[i] = x0 - kFdStep;
    const double lm = loss(x);
    x[i] = x0;
    g[i] = (lp - lm) / (2 * kFdStep);
  }
  return g;
}

double dot(const VecD& a, const VecF& r) {
  double s = 0;
  for (size_t i = 0; i < a.size(); i++) s += a[i] * r[i];
  return s;
}

bool same_bits(const VecF& a, const VecF& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// ---- naive double references -------------------------------------------------------------------

VecD ref_matmul(const VecD& inp, const VecD& w, const VecD* bias, int N, int C, int OC) {
  VecD out(size_t(N) * OC);
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      double s = bias ? (*bias)[o] : 0.0;
      for (int c = 0; c < C; c++) s += inp[n * C + c] * w[o * C + c];
      out[n * OC + o] = s;
    }
  return out;
}

VecD ref_layernorm(const VecD& x, const VecD& w, const VecD& b, int N, int C, VecD* mean = nullptr,
                   VecD* rstd = nullptr) {
  VecD out(size_t(N) * C);
  if (mean) mean->resize(N);
  if (rstd) rstd->resize(N);
  for (int n = 0; n < N; n++) {
    double m = 0, v = 0;
    for (int c = 0; c < C; c++) m += x[n * C + c];
    m /= C;
    for (int c = 0; c < C; c++) v += (x[n * C + c] - m) * (x[n * C + c] - m);
    v /= C;
    const double s = 1.0 / std::sqrt(v + 1e-5);
    for (int c = 0; c < C; c++) out[n * C + c] = (x[n * C + c] - m) * s * w[c] + b[c];
    if (mean) (*mean)[n] = m;
    if (rstd) (*rstd)[n] = s;
  }
  return out;
}

double ref_gelu(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

// Causal attention straight from the definition; returns out[B,T,C], fills att[B,NH,T,T].
VecD ref_attention(const VecD& qkv, int B, int T, int C, int NH, VecD* att = nullptr) {
  const int HS = C / NH;
  VecD out(size_t(B) * T * C, 0.0);
  if (att) att->assign(size_t(B) * NH * T * T, 0.0);
  std::vector<double> p(T);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        const double* q = &qkv[(size_t(b) * T + t) * 3 * C + h * HS];
        double mx = -1e300;
        for (int t2 = 0; t2 <= t; t2++) {
          const double* k = &qkv[(size_t(b) * T + t2) * 3 * C + C + h * HS];
          double s = 0;
          for (int i = 0; i < HS; i++) s += q[i] * k[i];
          p[t2] = s / std::sqrt(double(HS));
          mx = std::max(mx, p[t2]);
        }
        double sum = 0;
        for (int t2 = 0; t2 <= t; t2++) sum += (p[t2] = std::exp(p[t2] - mx));
        for (int t2 = 0; t2 <= t; t2++) {
          p[t2] /= sum;
          if (att) (*att)[((size_t(b) * NH + h) * T + t) * T + t2] = p[t2];
          const double* v = &qkv[(size_t(b) * T + t2) * 3 * C + 2 * C + h * HS];
          for (int i = 0; i < HS; i++) out[(size_t(b) * T + t) * C + h * HS + i] += p[t2] * v[i];
        }
      }
  return out;
}

VecD ref_embedding(const std::vector<int32_t>& tok, const VecD& wte, const VecD& wpe, int B, int T,
                   int C) {
  VecD out(size_t(B) * T * C);
  for (int n = 0; n < B * T; n++)
    for (int c = 0; c < C; c++) out[n * C + c] = wte[tok[n] * C + c] + wpe[(n % T) * C + c];
  return out;
}

VecD ref_xent(const VecD& logits, const std::vector<int32_t>& tg, int N, int V, int Vp) {
  VecD loss(N, 0.0);
  for (int n = 0; n < N; n++) {
    if (tg[n] < 0) continue;
    double mx = -1e300, s = 0;
    for (int v = 0; v < V; v++) mx = std::max(mx, logits[n * Vp + v]);
    for (int v = 0; v < V; v++) s += std::exp(logits[n * Vp + v] - mx);
    loss[n] = std::log(s) + mx - logits[n * Vp + tg[n]];
  }
  return loss;
}

class CpuOps : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be = make_cpu_backend();
};

// ---- memory and elementwise --------------------------------------------------------------------

TEST_F(CpuOps, AllocIsAlignedAndZeroed) {
  EXPECT_EQ(be->name(), "cpu");
  for (size_t bytes : {size_t(0), size_t(1), size_t(13), size_t(4096 + 3)}) {
    void* p = be->alloc(bytes);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << bytes;
    const auto* c = static_cast<const unsigned char*>(p);
    EXPECT_TRUE(std::all_of(c, c + bytes, [](unsigned char x) { return x == 0; })) << bytes;
    be->release(p);
  }
  VecF src = random_vec(100, 1), back(100);
  auto* d = static_cast<float*>(be->alloc(100 * sizeof(float)));
  be->to_device(d, src.data(), 100 * sizeof(float));
  be->to_host(back.data(), d, 100 * sizeof(float));
  be->release(d);
  EXPECT_TRUE(same_bits(src, back));
}

TEST_F(CpuOps, ElementwiseOpsMatchLoops) {
  for (size_t n : {size_t(7), size_t(100003)}) {  // serial and OpenMP paths
    VecF a = random_vec(n, 2), b = random_vec(n, 3), x = a, out(n);
    be->add(x.data(), b.data(), n);
    for (size_t i = 0; i < n; i++) ASSERT_EQ(x[i], a[i] + b[i]);
    be->scale(x.data(), 0.5f, n);
    for (size_t i = 0; i < n; i++) ASSERT_EQ(x[i], (a[i] + b[i]) * 0.5f);
    be->residual_forward(out.data(), a.data(), b.data(), n);
    for (size_t i = 0; i < n; i++) ASSERT_EQ(out[i], a[i] + b[i]);
    be->copy(out.data(), b.data(), n);
    EXPECT_TRUE(same_bits(out, b));
    be->zero(out.data(), n);
    EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float v) { return v == 0.0f; }));
  }
}

TEST_F(CpuOps, SumSquaresIsDoubleAndDeterministic) {
  const size_t n = 300001;
  VecF x = random_vec(n, 4);
  double want = 0;
  for (float v : x) want += double(v) * v;
  const double got = be->sum_squares(x.data(), n);
  EXPECT_NEAR(got, want, 1e-12 * want);  // double accumulation: far tighter than float could be
  EXPECT_EQ(got, be->sum_squares(x.data(), n));
  EXPECT_EQ(be->sum_squares(x.data(), 0), 0.0);
}

// The backend's sum of squares runs 16-wide on AVX-512, 8 or 4 on AVX2/SSE2 (cpu_math.cpp), and
// promises the same bits on every CPU: its order written out here in scalar code (pieces of 4096,
// 16 lanes each summing every 16th square, a fixed tree over the lanes, pieces added in order)
// must equal it exactly — an order that followed the vector width would not.
TEST_F(CpuOps, SumSquaresHasOneOrderOnEveryCpu) {
  auto scalar = [](const float* x, size_t n) {
    double total = 0;
    for (size_t at = 0; at < n; at += 4096) {
      const size_t len = std::min<size_t>(4096, n - at);
      double lane[16] = {};
      for (size_t i = 0; i < len; ++i) lane[i % 16] += double(x[at + i]) * double(x[at + i]);
      for (size_t j = 0; j < 8; ++j) lane[j] += lane[j + 8];
      for (size_t w = 4; w >= 1; w /= 2)
        for (size_t j = 0; j < w; ++j) lane[j] += lane[j + w];
      total += lane[0];
    }
    return total;
  };
  for (size_t n : {size_t(1), size_t(15), size_t(17), size_t(4095), size_t(4097), size_t(300001)}) {
    VecF x = random_vec(n, 5, -3, 3);
    EXPECT_EQ(be->sum_squares(x.data(), n), scalar(x.data(), n)) << "n " << n;
  }
}

// ---- matmul ------------------------------------------------------------------------------------

struct MatShape {
  int N, C, OC;
};

TEST_F(CpuOps, MatmulForwardMatchesReference) {
  for (MatShape s :
       {MatShape{7, 12, 5}, MatShape{1, 3, 1}, MatShape{33, 70, 19}, MatShape{64, 96, 130}}) {
    VecF inp = random_vec(size_t(s.N) * s.C, 5), w = random_vec(size_t(s.OC) * s.C, 6),
         bias = random_vec(s.OC, 7), out(size_t(s.N) * s.OC, 123.0f);
    VecD bias_d = to_d(bias);
    be->matmul_forward(out.data(), inp.data(), w.data(), bias.data(), s.N, s.C, s.OC);
    EXPECT_LT(rel_err(out, ref_matmul(to_d(inp), to_d(w), &bias_d, s.N, s.C, s.OC)), kTol)
        << s.N << "x" << s.C << "x" << s.OC;
    be->matmul_forward(out.data(), inp.data(), w.data(), nullptr, s.N, s.C, s.OC);
    EXPECT_LT(rel_err(out, ref_matmul(to_d(inp), to_d(w), nullptr, s.N, s.C, s.OC)), kTol);
  }
}

TEST_F(CpuOps, MatmulBackwardGradcheck) {
  for (MatShape s : {MatShape{7, 12, 5}, MatShape{4, 9, 3}}) {
    const int N = s.N, C = s.C, OC = s.OC;
    VecF inp = random_vec(size_t(N) * C, 8), w = random_vec(size_t(OC) * C, 9),
         bias = random_vec(OC, 10), R = random_vec(size_t(N) * OC, 11);
    VecD inp_d = to_d(inp), w_d = to_d(w), b_d = to_d(bias);
    // Parameter grads start non-zero to check they accumulate; dinp starts as garbage that
    // must be overwritten.
    VecF dw0 = random_vec(w.size(), 12), db0 = random_vec(OC, 13);
    VecF dinp(inp.size(), 77.0f), dw = dw0, db = db0;
    be->matmul_backward(dinp.data(), dw.data(), db.data(), R.data(), inp.data(), w.data(), N, C, OC,
                        false, true);
    VecD g_inp =
        fd_grad([&](const VecD& x) { return dot(ref_matmul(x, w_d, &b_d, N, C, OC), R); }, inp_d);
    VecD g_w =
        fd_grad([&](const VecD& x) { return dot(ref_matmul(inp_d, x, &b_d, N, C, OC), R); }, w_d);
    VecD g_b =
        fd_grad([&](const VecD& x) { return dot(ref_matmul(inp_d, w_d, &x, N, C, OC), R); }, b_d);
    for (size_t i = 0; i < dw.size(); i++) dw[i] -= dw0[i];
    for (size_t i = 0; i < db.size(); i++) db[i] -= db0[i];
    EXPECT_LT(rel_err(dinp, g_inp), kTol);
    EXPECT_LT(rel_err(dw, g_w), kTol);
    EXPECT_LT(rel_err(db, g_b), kTol);

    // accumulate_dinp = true adds onto what is there; null dinp/dbias are skipped.
    VecF dinp2 = dinp, dw2(w.size(), 0.0f);
    be->matmul_backward(dinp2.data(), dw2.data(), nullptr, R.data(), inp.data(), w.data(), N, C, OC,
                        true, true);
    for (size_t i = 0; i < dinp.size(); i++) dinp2[i] -= dinp[i];
    EXPECT_LT(rel_err(dinp2, g_inp), kTol);
    be->matmul_backward(nullptr, dw2.data(), nullptr, R.data(), inp.data(), w.data(), N, C, OC,
                        false, true);
    for (size_t i = 0; i < dw2.size(); i++) dw2[i] *= 0.5f;
    EXPECT_LT(rel_err(dw2, g_w), kTol);
  }
}

// The fp32 products run in oneDNN (the default) or OpenBLAS (BATON_CPU_GEMM=openblas), the choice
// read at every call. Above the 2^18 multiply-add threshold, on training-step shapes and odd ones:
// both engines match fp64 products, the knob decides which engine runs the forward and input
// gradient (counted: bits alone cannot tell, some shapes come out identical on both), and oneDNN's
// bits do not depend on the thread count. The weight gradient's (OpenBLAS, split by baton into
// row or column pieces) may: OpenBLAS picks its kernel by the piece's size, and on one VM
// (session 19's, OpenBLAS's Cooperlake kernels) the 97×257×131 product's bits differed between
// 1 and 2 threads.
TEST_F(CpuOps, MatmulEnginesMatchFp64AndTheKnobTakesEffect) {
  struct Env {  // BATON_CPU_GEMM for the scope of one engine's run
    explicit Env(const char* v) { setenv("BATON_CPU_GEMM", v, 1); }
    ~Env() { unsetenv("BATON_CPU_GEMM"); }
  };
  for (MatShape s : {MatShape{256, 192, 576}, MatShape{97, 257, 131}, MatShape{40, 1000, 33}}) {
    const int N = s.N, C = s.C, OC = s.OC;
    VecF inp = random_vec(size_t(N) * C, 31), w = random_vec(size_t(OC) * C, 32), bias = random_vec(OC, 33),
         dout = random_vec(size_t(N) * OC, 34), dw0 = random_vec(w.size(), 35);
    VecD out_ref(size_t(N) * OC), dinp_ref(size_t(N) * C, 0.0), dw_ref(w.size());
    for (int n = 0; n < N; n++)
      for (int o = 0; o < OC; o++) {
        double acc = bias[o];
        for (int c = 0; c < C; c++) acc += double(inp[size_t(n) * C + c]) * w[size_t(o) * C + c];
        out_ref[size_t(n) * OC + o] = acc;
        for (int c = 0; c < C; c++) dinp_ref[size_t(n) * C + c] += double(dout[size_t(n) * OC + o]) * w[size_t(o) * C + c];
      }
    for (int o = 0; o < OC; o++)
      for (int c = 0; c < C; c++) {
        double acc = dw0[size_t(o) * C + c];
        for (int n = 0; n < N; n++) acc += double(dout[size_t(n) * OC + o]) * inp[size_t(n) * C + c];
        dw_ref[size_t(o) * C + c] = acc;
      }
    std::vector<VecF> outs, dinps, dws;
    for (const char* engine : {"onednn", "openblas"}) {
      Env env(engine);
      VecF out(size_t(N) * OC, 5.0f), dinp(inp.size(), 7.0f), dw = dw0;
      const uint64_t calls = cpu_gemm_onednn_calls();
      be->matmul_forward(out.data(), inp.data(), w.data(), bias.data(), N, C, OC);
      be->matmul_backward(dinp.data(), dw.data(), nullptr, dout.data(), inp.data(), w.data(), N, C, OC, false, true);
      // oneDNN runs the forward and the input gradient; the weight gradient stays in OpenBLAS.
      EXPECT_EQ(cpu_gemm_onednn_calls() - calls, std::string(engine) == "onednn" ? 2u : 0u) << engine;
      EXPECT_LT(rel_err(out, out_ref), kTol) << engine << " " << N << "x" << C << "x" << OC;
      EXPECT_LT(rel_err(dinp, dinp_ref), kTol) << engine;
      EXPECT_LT(rel_err(dw, dw_ref), kTol) << engine;
      outs.push_back(out), dinps.push_back(dinp), dws.push_back(dw);
    }
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    VecF out1(size_t(N) * OC), dinp1(inp.size()), dw1 = dw0;
    be->matmul_forward(out1.data(), inp.data(), w.data(), bias.data(), N, C, OC);
    be->matmul_backward(dinp1.data(), dw1.data(), nullptr, dout.data(), inp.data(), w.data(), N, C, OC, false, true);
    omp_set_num_threads(threads);
    EXPECT_TRUE(same_bits(out1, outs[0]) && same_bits(dinp1, dinps[0]))
        << "oneDNN's bits changed with the thread count (" << threads << " -> 1)";
    EXPECT_LT(rel_err(dw1, dw_ref), kTol);
  }
  setenv("BATON_CPU_GEMM", "mkl", 1);
  EXPECT_THROW(cpu_gemm_engine(), Error);
  unsetenv("BATON_CPU_GEMM");
}

TEST_F(CpuOps, MatmulBackwardTwiceDoublesParamGrads) {
  const int N = 7, C = 12, OC = 5;
  VecF inp = random_vec(N * C, 14), w = random_vec(OC * C, 15), dout = random_vec(N * OC, 16);
  VecF dinp(N * C), dw(OC * C, 0.0f), db(OC, 0.0f);
  be->matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C,
                      OC, false, true);
  VecF dw1 = dw, db1 = db, dinp1 = dinp;
  be->matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C,
                      OC, false, true);
  // x + x is exact in float, so "doubled" is an exact comparison.
  for (size_t i = 0; i < dw.size(); i++) ASSERT_EQ(dw[i], 2 * dw1[i]);
  for (size_t i = 0; i < db.size(); i++) ASSERT_EQ(db[i], 2 * db1[i]);
  EXPECT_TRUE(same_bits(dinp, dinp1));  // activation grad overwritten, not accumulated
}

// The first micro-batch after zero_grads writes a dense layer's parameter gradients
// (accumulate_dweight = false: SequentialModel no longer clears the gradient buffer): the old
// contents are never read (NaN there stays out) and the bits are those of adding onto zeros — in
// fp32 and in bf16, native (oneDNN's kernels without their sum post-op; skipped where the CPU has
// no bf16) and emulated, fused with the input gradient or alone, on a shape whose K (the rows) the
// GEMM kernels block; with no rows the gradients are written as zeros.
TEST_F(CpuOps, MatmulBackwardWritesParamGradsAsAddingToZeros) {
  std::vector<std::pair<const char*, std::unique_ptr<Backend>>> backends;
  backends.emplace_back("fp32", make_cpu_backend(DType::F32));
  backends.emplace_back("bf16 emulated", make_cpu_backend(DType::BF16, CpuBf16::EMULATED));
  if (cpu_detail::cpu_has_bf16()) backends.emplace_back("bf16 native", make_cpu_backend(DType::BF16, CpuBf16::NATIVE));
  for (auto& [name, b] : backends)
    for (MatShape s : {MatShape{7, 12, 5}, MatShape{2048, 96, 200}, MatShape{0, 8, 3}}) {
      const int N = s.N, C = s.C, OC = s.OC;
      const DType act = b->act_dtype();
      auto acts = [&](size_t n, uint32_t seed) {  // in the backend's activation dtype
        const VecF v = random_vec(n, seed);
        std::vector<char> a(std::max<size_t>(n, 1) * dtype_size(act));
        b->cast(a.data(), act, v.data(), DType::F32, n);
        return a;
      };
      const std::vector<char> inp = acts(size_t(N) * C, 91), w = acts(size_t(OC) * C, 92),
                              dout = acts(size_t(N) * OC, 93);
      std::vector<char> dinp = acts(size_t(N) * C, 94);
      for (bool with_dinp : {false, true}) {
        const std::string what = std::string(name) + " " + std::to_string(N) + "x" + std::to_string(C) + "x" +
                                 std::to_string(OC) + (with_dinp ? " fused" : " alone");
        VecF dw_add(size_t(OC) * C, 0.0f), db_add(OC, 0.0f);
        VecF dw_set(dw_add.size(), std::nanf("")), db_set(OC, std::nanf(""));
        b->matmul_backward(with_dinp ? dinp.data() : nullptr, dw_add.data(), db_add.data(), dout.data(), inp.data(),
                           w.data(), N, C, OC, false, true);
        b->matmul_backward(with_dinp ? dinp.data() : nullptr, dw_set.data(), db_set.data(), dout.data(), inp.data(),
                           w.data(), N, C, OC, false, false);
        EXPECT_TRUE(same_bits(dw_set, dw_add)) << what;
        EXPECT_TRUE(same_bits(db_set, db_add)) << what;
        if (N > 0) {
          EXPECT_NE(dw_add[0], 0.0f) << what;  // a real sum, not an untouched zero
        }
      }
    }
}

// Zero bubble (Qi et al. 2023, §2 "splitting the backward"): the input part calls
// matmul_backward with dweight = dbias = null, the deferred weight part with dinp = null. The two
// together must give the fused call's gradients bit for bit, at shapes taking the threaded paths,
// and a null pointer must leave its gradient untouched (garbage stays garbage).
TEST_F(CpuOps, MatmulBackwardSplitEqualsFusedBitExact) {
  for (MatShape s : {MatShape{7, 12, 5}, MatShape{256, 96, 200}}) {
    const int N = s.N, C = s.C, OC = s.OC;
    VecF inp = random_vec(size_t(N) * C, 81), w = random_vec(size_t(OC) * C, 82),
         dout = random_vec(size_t(N) * OC, 83), dw0 = random_vec(w.size(), 84),
         db0 = random_vec(OC, 85);
    for (bool acc : {false, true}) {
      VecF dinp0 = random_vec(inp.size(), 86);
      VecF dinp = dinp0, dw = dw0, db = db0;
      be->matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N,
                          C, OC, acc, acc);
      VecF sdinp = dinp0, sdw = dw0, sdb = db0;
      // Input part: dinp only; the parameter gradients stay as they were.
      be->matmul_backward(sdinp.data(), nullptr, nullptr, dout.data(), inp.data(), w.data(), N, C,
                          OC, acc, true);
      EXPECT_TRUE(same_bits(sdinp, dinp));
      EXPECT_TRUE(same_bits(sdw, dw0));
      EXPECT_TRUE(same_bits(sdb, db0));
      // Weight part: dweight and dbias only (weight not even read: pass null).
      be->matmul_backward(nullptr, sdw.data(), sdb.data(), dout.data(), inp.data(), nullptr, N, C,
                          OC, acc, acc);
      EXPECT_TRUE(same_bits(sdw, dw));
      EXPECT_TRUE(same_bits(sdb, db));
      EXPECT_TRUE(same_bits(sdinp, dinp));
    }
    // dbias alone (inp not read when dweight is null).
    VecF db = db0, dbias_only = db0, dwx = dw0;
    be->matmul_backward(nullptr, dwx.data(), db.data(), dout.data(), inp.data(), w.data(), N, C, OC,
                        false, true);
    be->matmul_backward(nullptr, nullptr, dbias_only.data(), dout.data(), nullptr, nullptr, N, C,
                        OC, false, true);
    EXPECT_TRUE(same_bits(dbias_only, db));
  }
}

TEST_F(CpuOps, LayernormBackwardSplitEqualsFusedBitExact) {
  for (auto [N, C] : {std::pair{7, 12}, std::pair{256, 96}, std::pair{5, 130}}) {
    VecF x = random_vec(size_t(N) * C, 91), w = random_vec(C, 92), b = random_vec(C, 93),
         dy = random_vec(size_t(N) * C, 94), dx0 = random_vec(x.size(), 95),
         dw0 = random_vec(C, 96), db0 = random_vec(C, 97);
    VecF out(x.size()), mean(N), rstd(N);
    be->layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    VecF dx = dx0, dw = dw0, db = db0;
    be->layernorm_backward(dx.data(), dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(),
                           mean.data(), rstd.data(), N, C);
    VecF sdx = dx0, sdw = dw0, sdb = db0;
    be->layernorm_backward(sdx.data(), sdx.data(), nullptr, nullptr, dy.data(), x.data(), w.data(),
                           mean.data(), rstd.data(), N, C);
    EXPECT_TRUE(same_bits(sdx, dx));
    EXPECT_TRUE(same_bits(sdw, dw0));
    EXPECT_TRUE(same_bits(sdb, db0));
    be->layernorm_backward(nullptr, nullptr, sdw.data(), sdb.data(), dy.data(), x.data(), nullptr,
                           mean.data(), rstd.data(), N, C);
    EXPECT_TRUE(same_bits(sdw, dw));
    EXPECT_TRUE(same_bits(sdb, db));
    EXPECT_TRUE(same_bits(sdx, dx));
    // Each parameter gradient on its own.
    VecF only_w = dw0, only_b = db0;
    be->layernorm_backward(nullptr, nullptr, only_w.data(), nullptr, dy.data(), x.data(), nullptr,
                           mean.data(), rstd.data(), N, C);
    be->layernorm_backward(nullptr, nullptr, nullptr, only_b.data(), dy.data(), x.data(), nullptr,
                           mean.data(), rstd.data(), N, C);
    EXPECT_TRUE(same_bits(only_w, dw));
    EXPECT_TRUE(same_bits(only_b, db));
  }
}

// ---- layernorm ---------------------------------------------------------------------------------

// dinp = dres + the input gradient in one pass is exactly the copy of dres followed by the
// accumulation (and null dres exactly zeroing first), on fp32 and bf16 activations.
std::vector<uint8_t> as_act(DType t, const VecF& v) {
  std::vector<uint8_t> out(v.size() * (t == DType::F32 ? 4 : 2));
  if (t == DType::F32) std::memcpy(out.data(), v.data(), out.size());
  else
    for (size_t i = 0; i < v.size(); ++i) {
      const uint16_t h = f32_to_bf16(v[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  return out;
}

TEST(CpuOpsResidualGradient, LayernormBackwardIntoAnotherBufferEqualsCopyThenAccumulate) {
  for (DType t : {DType::F32, DType::BF16}) {
    std::unique_ptr<Backend> b = make_cpu_backend(t);
    for (auto [N, C] : {std::pair{7, 12}, std::pair{33, 256}}) {
      const size_t n = size_t(N) * C, a = b->act_size();
      const VecF x32 = random_vec(n, 61, -2, 3), dy32 = random_vec(n, 62), r32 = random_vec(n, 63);
      const VecF w = random_vec(C, 64), bias = random_vec(C, 65);
      std::vector<uint8_t> x = as_act(t, x32), dy = as_act(t, dy32), r = as_act(t, r32), out(n * a);
      std::vector<uint8_t> wc = as_act(t, w), bc = as_act(t, bias);
      VecF mean(N), rstd(N);
      b->layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), wc.data(), bc.data(), N, C);
      // The two-pass reference: copy (bytes), accumulate in place; zero, accumulate.
      std::vector<uint8_t> want = r, want0(n * a, 0), got(n * a, 0xAB), got0(n * a, 0xCD);
      b->layernorm_backward(want.data(), want.data(), nullptr, nullptr, dy.data(), x.data(), wc.data(),
                            mean.data(), rstd.data(), N, C);
      b->layernorm_backward(want0.data(), want0.data(), nullptr, nullptr, dy.data(), x.data(), wc.data(),
                            mean.data(), rstd.data(), N, C);
      b->layernorm_backward(got.data(), r.data(), nullptr, nullptr, dy.data(), x.data(), wc.data(),
                            mean.data(), rstd.data(), N, C);
      b->layernorm_backward(got0.data(), nullptr, nullptr, nullptr, dy.data(), x.data(), wc.data(),
                            mean.data(), rstd.data(), N, C);
      EXPECT_EQ(got, want) << (t == DType::F32 ? "fp32 " : "bf16 ") << N << "x" << C;
      EXPECT_EQ(got0, want0) << (t == DType::F32 ? "fp32 " : "bf16 ") << N << "x" << C;
      EXPECT_NE(got, want0);  // dres was added
    }
  }
}

TEST_F(CpuOps, LayernormForwardMatchesReference) {
  for (auto [N, C] : {std::pair{7, 12}, std::pair{5, 130}, std::pair{1, 1}}) {
    VecF x = random_vec(N * C, 17, -2, 3), w = random_vec(C, 18), b = random_vec(C, 19);
    VecF out(N * C), mean(N), rstd(N);
    be->layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    VecD m, r;
    VecD want = ref_layernorm(to_d(x), to_d(w), to_d(b), N, C, &m, &r);
    EXPECT_LT(rel_err(out, want), kTol) << N << "x" << C;
    EXPECT_LT(rel_err(mean, m), kTol);
    EXPECT_LT(rel_err(rstd, r), kTol);
  }
}

TEST_F(CpuOps, LayernormBackwardGradcheckAndAccumulates) {
  const int N = 7, C = 12;
  VecF x = random_vec(N * C, 20, -2, 3), w = random_vec(C, 21), b = random_vec(C, 22),
       R = random_vec(N * C, 23);
  VecF out(N * C), mean(N), rstd(N);
  be->layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  // All three outputs accumulate: start them from random values and subtract afterwards.
  VecF dx0 = random_vec(N * C, 24), dw0 = random_vec(C, 25), db0 = random_vec(C, 26);
  VecF dx = dx0, dw = dw0, db = db0;
  be->layernorm_backward(dx.data(), dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(),
                         mean.data(), rstd.data(), N, C);
  for (size_t i = 0; i < dx.size(); i++) dx[i] -= dx0[i];
  for (int i = 0; i < C; i++) dw[i] -= dw0[i], db[i] -= db0[i];
  VecD xd = to_d(x), wd = to_d(w), bd = to_d(b);
  EXPECT_LT(
      rel_err(dx,
              fd_grad([&](const VecD& v) { return dot(ref_layernorm(v, wd, bd, N, C), R); }, xd)),
      kTol);
  EXPECT_LT(
      rel_err(dw,
              fd_grad([&](const VecD& v) { return dot(ref_layernorm(xd, v, bd, N, C), R); }, wd)),
      kTol);
  EXPECT_LT(
      rel_err(db,
              fd_grad([&](const VecD& v) { return dot(ref_layernorm(xd, wd, v, N, C), R); }, bd)),
      kTol);
}

TEST_F(CpuOps, ResidualLayernormForwardAndGradcheck) {
  const int N = 5, C = 12;
  VecF a = random_vec(N * C, 27), b = random_vec(N * C, 28), w = random_vec(C, 29),
       bias = random_vec(C, 30), R = random_vec(N * C, 31);
  VecF res(N * C), out(N * C), mean(N), rstd(N);
  be->residual_layernorm_forward(res.data(), out.data(), mean.data(), rstd.data(), a.data(),
                                 b.data(), w.data(), bias.data(), N, C);
  for (int i = 0; i < N * C; i++) ASSERT_EQ(res[i], a[i] + b[i]);
  // The fused op is bit-identical to residual_forward + layernorm_forward.
  VecF res2(N * C), out2(N * C), mean2(N), rstd2(N);
  be->residual_forward(res2.data(), a.data(), b.data(), N * C);
  be->layernorm_forward(out2.data(), mean2.data(), rstd2.data(), res2.data(), w.data(), bias.data(),
                        N, C);
  EXPECT_TRUE(same_bits(out, out2));
  EXPECT_TRUE(same_bits(mean, mean2));
  EXPECT_TRUE(same_bits(rstd, rstd2));
  // Backward goes through layernorm_backward on the saved residual; d/da = d/db.
  VecF dres(N * C, 0.0f), dw(C, 0.0f), db(C, 0.0f);
  be->layernorm_backward(dres.data(), nullptr, dw.data(), db.data(), R.data(), res.data(), w.data(),
                         mean.data(), rstd.data(), N, C);
  VecD ad = to_d(a), bd = to_d(b), wd = to_d(w), biasd = to_d(bias);
  auto loss_a = [&](const VecD& v) {
    VecD s(v.size());
    for (size_t i = 0; i < v.size(); i++) s[i] = v[i] + bd[i];
    return dot(ref_layernorm(s, wd, biasd, N, C), R);
  };
  EXPECT_LT(rel_err(dres, fd_grad(loss_a, ad)), kTol);
}

// ---- GELU --------------------------------------------------------------------------------------

TEST_F(CpuOps, GeluForwardAndGradcheck) {
  const int n = 37;
  VecF x = random_vec(n, 32, -4, 4), R = random_vec(n, 33), out(n), dx(n, 55.0f);
  x[0] = 0.0f;
  be->gelu_forward(out.data(), x.data(), n);
  VecD want(n);
  for (int i = 0; i < n; i++) want[i] = ref_gelu(x[i]);
  EXPECT_LT(rel_err(out, want), kTol);
  be->gelu_backward(dx.data(), x.data(), R.data(), n);  // overwrites the 55s
  VecD g = fd_grad(
      [&](const VecD& v) {
        double s = 0;
        for (int i = 0; i < n; i++) s += ref_gelu(v[i]) * R[i];
        return s;
      },
      to_d(x));
  EXPECT_LT(rel_err(dx, g), kTol);
}

// cpu_math.h's exp: within 2 ulp of the correctly rounded e^x on its range (every 1e-3), clamped
// outside it; GELU and its derivative through it within 8 ulp (1 + |u|) (relative, or of the
// gradient's terms where they cancel; |u| is e^(-2u)'s condition) of the double formula
// on [-12, 12] over 2^18 points (below x ~ -8.6 the cap's x e^-80);
// the backend's loops give the same bits as the scalar functions (vector lanes and tail alike).
TEST(CpuMath, ExpWithinTwoUlp) {
  for (int i = -86999; i <= 87999; ++i) {
    const float x = float(i) * 1e-3f;
    const double want = std::exp(double(x));
    const float got = cpu_math::exp_approx(x);
    const double ulp = std::nextafter(float(want), INFINITY) - float(want);
    ASSERT_LE(std::fabs(got - want), 2 * ulp) << "x = " << x;
  }
  EXPECT_EQ(cpu_math::exp_approx(-1000.0f), cpu_math::exp_approx(-87.0f));
  EXPECT_EQ(cpu_math::exp_approx(1000.0f), cpu_math::exp_approx(88.0f));
  EXPECT_TRUE(std::isfinite(cpu_math::exp_approx(1e30f)));
}

TEST(CpuMath, GeluAndItsGradientWithinAFewUlp) {
  // Within 8 ulp (1 + |u|) of `scale` (the result, or for the gradient the larger of its two terms s and
  // x s (1 - s) k (1 + 3 0.044715 x^2): the sum cancels for x < -0.75, where a few ulp of the terms
  // is what any float evaluation can promise).
  // u itself is rounded to float (|du| ~ |u| 2^-24), which e^(-2u) turns into a relative error of
  // ~2|u| 2^-24 per rounding of u (three): the bound is 8 ulp (1 + |u|).
  auto check = [](float x, float got, double want, double scale, double u, const char* what) {
    const float m = float(std::max(std::fabs(want), scale));
    const double ulp = std::max(double(std::nextafter(m, INFINITY) - m), 1e-45);
    ASSERT_LE(std::fabs(got - want), 8 * ulp * (1 + u)) << what << " x = " << x;
  };
  // The reference in double as 0.5 x (1 + tanh u) = x sigma(2u): the tanh form underflows to 0
  // (1 + tanh u, 1 - tanh^2 u) for u < -19 even in double.
  const double k = std::sqrt(2 / M_PI);
  for (int i = -(1 << 17); i <= (1 << 17); ++i) {
    const float x = float(i) * (12.0f / (1 << 17));
    const double xd = x, u = k * (xd + 0.044715 * xd * xd * xd), e = std::exp(-2 * u), s = 1 / (1 + e);
    const double t = 2 * xd * s * (e * s) * k * (1 + 3 * 0.044715 * xd * xd);
    if (-2 * u > 80) {  // the exponent's cap (e^80), x < -8.6: x e^-80 instead of ~0
      ASSERT_LE(std::fabs(cpu_math::gelu(x)), 1e-32) << x;
      ASSERT_LE(std::fabs(cpu_math::gelu_grad(x)), 1e-31) << x;
      continue;
    }
    check(x, cpu_math::gelu(x), xd * s, std::fabs(xd * s), std::fabs(u), "gelu");
    check(x, cpu_math::gelu_grad(x), s + t, std::max(s, std::fabs(t)), std::fabs(u), "gelu'");
  }
  auto be = make_cpu_backend();
  const size_t n = 20003;  // not a multiple of 4: the padded tail too
  VecF x = random_vec(n, 41, -6, 6), out(n), dx(n), ones(n, 1.0f);
  be->gelu_forward(out.data(), x.data(), n);
  be->gelu_backward(dx.data(), x.data(), ones.data(), n);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(out[i], cpu_math::gelu(x[i])) << i;  // the same function in every lane and the tail
    ASSERT_EQ(dx[i], cpu_math::gelu_grad(x[i])) << i;
  }
}

// The cross-entropy's row functions: exp_sum stores exp_approx per element (vector lanes and tail
// alike, in place too) and sums them in the order written out here (16 lanes, a fixed tree) on
// every CPU; exp_scale multiplies the same exponentials; max_of is the sequential std::max.
TEST(CpuMath, SoftmaxRowsHaveOneOrderOnEveryCpu) {
  for (size_t n : {size_t(1), size_t(15), size_t(17), size_t(50257)}) {
    VecF x = random_vec(n, 77, -20, 5);
    float m = x[0];
    for (float v : x) m = std::max(m, v);
    ASSERT_EQ(cpu_math::max_of(x.data(), n), m) << n;
    double lane[16] = {};
    for (size_t i = 0; i < n; ++i) lane[i % 16] += double(cpu_math::exp_approx(x[i] - m));
    for (size_t j = 0; j < 8; ++j) lane[j] += lane[j + 8];
    for (size_t w = 4; w >= 1; w /= 2)
      for (size_t j = 0; j < w; ++j) lane[j] += lane[j + w];
    VecF out(n), scaled(n), inplace = x;
    EXPECT_EQ(cpu_math::exp_sum(out.data(), x.data(), n, m), lane[0]) << n;
    EXPECT_EQ(cpu_math::exp_sum(nullptr, x.data(), n, m), lane[0]) << n;
    EXPECT_EQ(cpu_math::exp_sum(inplace.data(), inplace.data(), n, m), lane[0]) << n;
    cpu_math::exp_scale(scaled.data(), x.data(), n, m, 0.37f);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(out[i], cpu_math::exp_approx(x[i] - m)) << i;
      ASSERT_EQ(inplace[i], out[i]) << i;
      ASSERT_EQ(scaled[i], out[i] * 0.37f) << i;
    }
    // Attention's rows: exp((x - m) · scale) summed in the same lanes; the dot product's products in
    // double, in the same lanes.
    const VecF y = random_vec(n, 78);
    double elane[16] = {}, dlane[16] = {};
    for (size_t i = 0; i < n; ++i) {
      elane[i % 16] += double(cpu_math::exp_approx((x[i] - m) * 0.125f));
      dlane[i % 16] += double(x[i]) * double(y[i]);
    }
    for (double* l : {elane, dlane}) {
      for (size_t j = 0; j < 8; ++j) l[j] += l[j + 8];
      for (size_t w = 4; w >= 1; w /= 2)
        for (size_t j = 0; j < w; ++j) l[j] += l[j + w];
    }
    VecF ex = x;
    EXPECT_EQ(cpu_math::exp_sum_scaled(ex.data(), ex.data(), n, m, 0.125f), elane[0]) << n;
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(ex[i], cpu_math::exp_approx((x[i] - m) * 0.125f)) << i;
    EXPECT_EQ(cpu_math::dot(x.data(), y.data(), n), dlane[0]) << n;
  }
}

// ---- attention ---------------------------------------------------------------------------------

struct AttShape {
  int B, T, C, NH;
};

// Runs `check` once per attention-kernel instruction set this CPU supports (baseline SSE2, AVX2,
// AVX-512), so every compiled variant is tested, then restores the default.
template <class F>
void for_each_kernel_isa(F check) {
  using cpu_detail::KernelIsa;
  const KernelIsa saved = cpu_detail::kernel_isa();
  for (KernelIsa isa : {KernelIsa::BASE, KernelIsa::AVX2, KernelIsa::AVX512}) {
    if (!cpu_detail::set_kernel_isa(isa)) continue;
    SCOPED_TRACE(testing::Message() << "kernel isa " << int(isa));
    check();
  }
  cpu_detail::set_kernel_isa(saved);
}

TEST_F(CpuOps, AttentionForwardMatchesReference) {
  // Covers HS = 4, 4, 32, 48 and T across several register tiles (the kernel tiles 4 x 8..32).
  for_each_kernel_isa([&] {
    for (AttShape s : {AttShape{2, 5, 8, 2}, AttShape{1, 19, 12, 3}, AttShape{2, 37, 64, 2},
                       AttShape{1, 70, 48, 1}, AttShape{1, 1, 4, 1}}) {
      const int B = s.B, T = s.T, C = s.C, NH = s.NH;
      VecF qkv = random_vec(size_t(B) * T * 3 * C, 34, -2, 2);
      VecF out(size_t(B) * T * C, 9.0f), att(size_t(B) * NH * T * T, 9.0f);
      be->attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
      VecD att_ref;
      VecD out_ref = ref_attention(to_d(qkv), B, T, C, NH, &att_ref);
      EXPECT_LT(rel_err(out, out_ref), kTol) << B << "," << T << "," << C << "," << NH;
      EXPECT_LT(rel_err(att, att_ref), kTol);
      for (int r = 0; r < B * NH * T; r++) {
        const int t = r % T;
        const float* row = &att[size_t(r) * T];
        double sum = 0;
        for (int t2 = 0; t2 <= t; t2++) sum += row[t2];
        ASSERT_NEAR(sum, 1.0, 1e-5) << "row " << r;
        for (int t2 = t + 1; t2 < T; t2++) ASSERT_EQ(row[t2], 0.0f) << "above diagonal " << r;
      }
    }
  });
}

TEST_F(CpuOps, AttentionBackwardGradcheck) {
  for_each_kernel_isa([&] {
    for (AttShape s : {AttShape{2, 5, 8, 2}, AttShape{1, 21, 32, 2}}) {
      const int B = s.B, T = s.T, C = s.C, NH = s.NH;
      VecF qkv = random_vec(size_t(B) * T * 3 * C, 35, -2, 2),
           R = random_vec(size_t(B) * T * C, 36);
      VecF out(size_t(B) * T * C), att(size_t(B) * NH * T * T), dqkv(qkv.size(), 99.0f);
      be->attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
      be->attention_backward(dqkv.data(), R.data(), /*out, unused by the CPU*/ nullptr, qkv.data(), att.data(), B, T, C, NH);
      VecD g =
          fd_grad([&](const VecD& x) { return dot(ref_attention(x, B, T, C, NH), R); }, to_d(qkv));
      EXPECT_LT(rel_err(dqkv, g), kTol) << B << "," << T << "," << C << "," << NH;
    }
  });
}

TEST_F(CpuOps, AttentionBackwardDirectionalDerivativeLargerShape) {
  // Too many inputs for a full finite-difference sweep; check <grad, d> against the central
  // difference of L along random directions d instead (still in double on the reference).
  for_each_kernel_isa([&] {
    const int B = 2, T = 37, C = 64, NH = 2;
    VecF qkv = random_vec(size_t(B) * T * 3 * C, 37, -2, 2), R = random_vec(size_t(B) * T * C, 38);
    VecF out(size_t(B) * T * C), att(size_t(B) * NH * T * T), dqkv(qkv.size());
    be->attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    be->attention_backward(dqkv.data(), R.data(), /*out, unused by the CPU*/ nullptr, qkv.data(), att.data(), B, T, C, NH);
    const VecD x0 = to_d(qkv);
    for (uint32_t seed : {39u, 40u, 41u}) {
      VecF d = random_vec(qkv.size(), seed);
      VecD xp = x0, xm = x0;
      for (size_t i = 0; i < x0.size(); i++) xp[i] += kFdStep * d[i], xm[i] -= kFdStep * d[i];
      const double want =
          (dot(ref_attention(xp, B, T, C, NH), R) - dot(ref_attention(xm, B, T, C, NH), R)) /
          (2 * kFdStep);
      double got = 0, scale = 0;
      for (size_t i = 0; i < x0.size(); i++) {
        got += double(dqkv[i]) * d[i];
        scale += std::abs(double(dqkv[i]) * d[i]);
      }
      EXPECT_NEAR(got, want, kTol * scale);  // relative to the sum of |terms|: no cancellation luck
    }
  });
}

// ---- embeddings --------------------------------------------------------------------------------

TEST_F(CpuOps, EmbeddingForwardAndGradcheck) {
  const int B = 2, T = 5, C = 8, V = 11;
  std::vector<int32_t> tok = {3, 0, 3, 10, 7, 3, 3, 1, 10, 0};  // repeats collide in dwte
  VecF wte = random_vec(V * C, 42), wpe = random_vec(T * C, 43), R = random_vec(B * T * C, 44);
  VecF out(B * T * C);
  be->embedding_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C, 0, V);
  VecD wte_d = to_d(wte), wpe_d = to_d(wpe);
  EXPECT_LT(rel_err(out, ref_embedding(tok, wte_d, wpe_d, B, T, C)), kTol);
  VecF dwte0 = random_vec(V * C, 45), dwpe0 = random_vec(T * C, 46);
  VecF dwte = dwte0, dwpe = dwpe0;
  be->embedding_backward(dwte.data(), dwpe.data(), R.data(), tok.data(), nullptr, B, T, C, 0, V);
  for (size_t i = 0; i < dwte.size(); i++) dwte[i] -= dwte0[i];
  for (size_t i = 0; i < dwpe.size(); i++) dwpe[i] -= dwpe0[i];
  EXPECT_LT(
      rel_err(dwte,
              fd_grad([&](const VecD& v) { return dot(ref_embedding(tok, v, wpe_d, B, T, C), R); },
                      wte_d)),
      kTol);
  EXPECT_LT(
      rel_err(dwpe,
              fd_grad([&](const VecD& v) { return dot(ref_embedding(tok, wte_d, v, B, T, C), R); },
                      wpe_d)),
      kTol);
  // Rows of unused tokens are untouched.
  for (int c = 0; c < C; c++) EXPECT_EQ(dwte[2 * C + c], 0.0f);
}

// ---- classifier --------------------------------------------------------------------------------

// Vocab-parallel embedding: the shards' outputs (wpe on one shard only) add up to the full
// embedding, and the shards' gradients are the matching row blocks of the full gradient.
TEST_F(CpuOps, EmbeddingVocabShardsSumToFull) {
  const int B = 2, T = 5, C = 8, V = 12;
  std::vector<int32_t> tok = {3, 0, 3, 11, 7, 3, 5, 1, 10, 0};
  VecF wte = random_vec(V * C, 42), wpe = random_vec(T * C, 43), dy = random_vec(B * T * C, 44);
  VecF full(B * T * C), dwte_full(V * C, 0.0f), dwpe_full(T * C, 0.0f);
  be->embedding_forward(full.data(), tok.data(), wte.data(), wpe.data(), B, T, C, 0, V);
  be->embedding_backward(dwte_full.data(), dwpe_full.data(), dy.data(), tok.data(), nullptr, B, T, C, 0, V);
  for (int shards : {2, 3, 4}) {
    const int rows = V / shards;
    VecF sum(B * T * C, 0.0f);
    for (int s = 0; s < shards; s++) {
      VecF part(B * T * C), dw(rows * C, 0.0f);
      be->embedding_forward(part.data(), tok.data(), wte.data() + s * rows * C, s == 0 ? wpe.data() : nullptr,
                            B, T, C, s * rows, rows);
      for (size_t i = 0; i < sum.size(); i++) sum[i] += part[i];
      be->embedding_backward(dw.data(), nullptr, dy.data(), tok.data(), nullptr, B, T, C, s * rows, rows);
      for (int i = 0; i < rows * C; i++) EXPECT_EQ(dw[i], dwte_full[s * rows * C + i]) << shards;
    }
    for (size_t i = 0; i < sum.size(); i++) EXPECT_NEAR(sum[i], full[i], 1e-6f);
  }
}

// Vocab-parallel cross-entropy: per-shard statistics combined as the tensor-parallel collectives
// would (max, then sums) give the fused op's losses and logits gradient, padding included.
TEST_F(CpuOps, VocabParallelCrossEntropyMatchesFused) {
  const int N = 7, V = 45, Vp = 48;
  VecF logits = random_vec(N * Vp, 50);
  for (auto& x : logits) x *= 4.0f;
  std::vector<int32_t> tgt = {0, 44, 17, -1, 23, 5, 40};
  VecF want_loss(N), want_d(N * Vp);
  be->softmax_cross_entropy(want_loss.data(), want_d.data(), logits.data(), tgt.data(), N, V, Vp, 0.1f);
  for (int shards : {1, 2, 3, 4}) {
    const int Vl = Vp / shards;
    std::vector<VecF> part(shards);
    VecF gmax(N, -INFINITY), gsum(N, 0.0f), gtgt(N, 0.0f);
    for (int s = 0; s < shards; s++) {
      part[s].resize(N * Vl);
      for (int n = 0; n < N; n++)
        for (int j = 0; j < Vl; j++) part[s][n * Vl + j] = logits[n * Vp + s * Vl + j];
    }
    auto vlocal = [&](int s) { return std::clamp(V - s * Vl, 0, Vl); };
    for (int s = 0; s < shards; s++) {
      VecF m(N);
      be->logits_row_max(m.data(), part[s].data(), N, vlocal(s), Vl);
      for (int n = 0; n < N; n++) gmax[n] = std::max(gmax[n], m[n]);
    }
    for (int s = 0; s < shards; s++) {
      VecF se(N), tl(N);
      be->logits_sumexp_target(se.data(), tl.data(), part[s].data(), gmax.data(), tgt.data(), N,
                               vlocal(s), Vl, s * Vl);
      for (int n = 0; n < N; n++) gsum[n] += se[n], gtgt[n] += tl[n];
    }
    for (int s = 0; s < shards; s++) {
      VecF loss(N);
      be->cross_entropy_finish(loss.data(), part[s].data(), part[s].data(), gmax.data(), gsum.data(),
                               gtgt.data(), tgt.data(), N, vlocal(s), Vl, s * Vl, 0.1f);
      for (int n = 0; n < N; n++) {
        EXPECT_NEAR(loss[n], want_loss[n], 1e-5f * (1 + std::abs(want_loss[n])));
        for (int j = 0; j < Vl; j++)
          EXPECT_NEAR(part[s][n * Vl + j], want_d[n * Vp + s * Vl + j], 1e-6f) << shards;
      }
    }
  }
}

TEST_F(CpuOps, SoftmaxCrossEntropyMatchesReferenceAndGradcheck) {
  const int N = 7, V = 10, Vp = 16;
  const float dloss = 1.0f / 6;  // mean over the 6 counted rows
  std::vector<int32_t> tg = {3, 9, -1, 0, 5, 5, 2};
  VecF logits = random_vec(N * Vp, 47, -3, 3);
  for (int n = 0; n < N; n++)
    for (int v = V; v < Vp; v++) logits[n * Vp + v] = 1e4f;  // padding must not enter the softmax
  VecF losses(N), dlogits(N * Vp, 7.0f);
  be->softmax_cross_entropy(losses.data(), dlogits.data(), logits.data(), tg.data(), N, V, Vp,
                            dloss);
  VecD ref = ref_xent(to_d(logits), tg, N, V, Vp);
  EXPECT_LT(rel_err(losses, ref), kTol);
  EXPECT_EQ(losses[2], 0.0f);
  for (int n = 0; n < N; n++)
    for (int v = V; v < Vp; v++) ASSERT_EQ(dlogits[n * Vp + v], 0.0f);  // padded columns
  for (int v = 0; v < Vp; v++) ASSERT_EQ(dlogits[2 * Vp + v], 0.0f);    // ignored row
  // d(dloss * sum_n loss_n) / dlogits by finite differences (padded columns included: 0).
  VecD g = fd_grad(
      [&](const VecD& x) {
        double s = 0;
        for (double l : ref_xent(x, tg, N, V, Vp)) s += l;
        return s * dloss;
      },
      to_d(logits));
  EXPECT_LT(rel_err(dlogits, g), kTol);

  // In place (dlogits aliases logits) gives the same bits; no gradient requested works too.
  VecF inplace = logits, losses2(N), losses3(N);
  be->softmax_cross_entropy(losses2.data(), inplace.data(), inplace.data(), tg.data(), N, V, Vp,
                            dloss);
  EXPECT_TRUE(same_bits(inplace, dlogits));
  EXPECT_TRUE(same_bits(losses2, losses));
  be->softmax_cross_entropy(losses3.data(), nullptr, logits.data(), tg.data(), N, V, Vp, dloss);
  EXPECT_LT(rel_err(losses3, ref), kTol);
}

TEST_F(CpuOps, SoftmaxCrossEntropyUniformAndExtremeLogits) {
  const int N = 3, V = 50257, Vp = 50304;
  VecF logits(size_t(N) * Vp, 0.0f), losses(N);
  std::vector<int32_t> tg = {0, 50256, 123};
  logits[size_t(2) * Vp + 5] = 1000.0f;  // would overflow exp without the max shift
  be->softmax_cross_entropy(losses.data(), nullptr, logits.data(), tg.data(), N, V, Vp, 1.0f);
  // Uniform logits: ln V. The float sum of 50257 ones is exact; only the log rounds.
  EXPECT_NEAR(losses[0], std::log(double(V)), 1e-5);
  EXPECT_NEAR(losses[1], std::log(double(V)), 1e-5);
  EXPECT_NEAR(losses[2], 1000.0, 1e-3);
}

// ---- AdamW -------------------------------------------------------------------------------------

TEST_F(CpuOps, AdamWTwoStepsMatchFormula) {
  const size_t n = 9;
  VecF p = random_vec(n, 48), g1 = random_vec(n, 49), g2 = random_vec(n, 50);
  VecF m(n, 0.0f), v(n, 0.0f);
  AdamWArgs a;
  a.lr = 0.01f;
  a.beta1 = 0.9f;
  a.beta2 = 0.95f;
  a.eps = 1e-8f;
  a.weight_decay = 0.1f;
  a.grad_scale = 0.5f;
  VecD pd = to_d(p), md(n, 0.0), vd(n, 0.0);
  for (int step = 1; step <= 2; step++) {
    const VecF& g = step == 1 ? g1 : g2;
    a.step = step;
    be->adamw_step(p.data(), g.data(), m.data(), v.data(), n, a);
    // Hand-derived: g' = s g; m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2;
    // p -= lr (m / (1-b1^t) / (sqrt(v / (1-b2^t)) + eps) + wd p).
    for (size_t i = 0; i < n; i++) {
      const double gs = double(g[i]) * a.grad_scale;
      md[i] = double(a.beta1) * md[i] + (1 - double(a.beta1)) * gs;
      vd[i] = double(a.beta2) * vd[i] + (1 - double(a.beta2)) * gs * gs;
      const double mh = md[i] / (1 - std::pow(double(a.beta1), step));
      const double vh = vd[i] / (1 - std::pow(double(a.beta2), step));
      pd[i] -=
          double(a.lr) * (mh / (std::sqrt(vh) + double(a.eps)) + double(a.weight_decay) * pd[i]);
    }
    EXPECT_LT(rel_err(m, md), 1e-6) << step;
    EXPECT_LT(rel_err(v, vd), 1e-6) << step;
    EXPECT_LT(rel_err(p, pd), 1e-6) << step;  // few float ops per element: ~1e-7
  }
  // Step 1 with bias correction moves each weight by ~lr * sign(g) (+ decay).
  VecF q = {1.0f}, gq = {-3.0f}, mq = {0.0f}, vq = {0.0f};
  a.step = 1;
  a.grad_scale = 1.0f;
  be->adamw_step(q.data(), gq.data(), mq.data(), vq.data(), 1, a);
  EXPECT_NEAR(q[0], 1.0 + 0.01 - 0.01 * 0.1, 1e-6);
}

// AdamW runs per instruction set (cpu_adamw.cpp, target_clones, no fused multiply-adds): every
// clone must store the bits of the plain float formula evaluated one element at a time, in the
// order the source writes it — on this machine the AVX-512 clone against this file's scalar code.
TEST_F(CpuOps, AdamWHasTheScalarBitsOnEveryCpu) {
  const size_t n = 70001;  // threaded, and a tail in every piece size
  VecF p = random_vec(n, 61), g = random_vec(n, 62), m = random_vec(n, 63, -0.1f, 0.1f), v = random_vec(n, 64, 0, 0.1f);
  VecF q = p, mq = m, vq = v;
  AdamWArgs a;
  a.lr = 3e-4f;
  a.beta1 = 0.9f;
  a.beta2 = 0.95f;
  a.eps = 1e-8f;
  a.weight_decay = 0.1f;
  a.grad_scale = 0.7f;
  a.step = 3;
  be->adamw_step(p.data(), g.data(), m.data(), v.data(), n, a);
  const float bc1 = float(1.0 - std::pow(double(a.beta1), 3.0)), bc2 = float(1.0 - std::pow(double(a.beta2), 3.0));
  for (size_t i = 0; i < n; ++i) {
    volatile float gi = g[i] * a.grad_scale;  // volatile: one rounding per operation, as the kernel
    volatile float mi = a.beta1 * mq[i] + (1.0f - a.beta1) * gi;
    volatile float g2 = (1.0f - a.beta2) * gi * gi;
    volatile float vi = a.beta2 * vq[i] + g2;
    volatile float mhat = mi / bc1, vhat = vi / bc2;
    volatile float den = std::sqrt(float(vhat)) + a.eps;
    volatile float upd = mhat / den + a.weight_decay * q[i];
    q[i] -= a.lr * upd;
    ASSERT_EQ(m[i], float(mi)) << i;
    ASSERT_EQ(v[i], float(vi)) << i;
    ASSERT_EQ(p[i], q[i]) << i;
  }
}

// ---- determinism -------------------------------------------------------------------------------

TEST_F(CpuOps, RepeatedCallsGiveIdenticalBits) {
  // Shapes large enough to take the multi-threaded paths.
  const int B = 4, T = 64, C = 96, NH = 3, N = B * T, OC = 200, V = 300;
  VecF x = random_vec(size_t(N) * C, 51), w = random_vec(size_t(OC) * C, 52),
       dy = random_vec(size_t(N) * OC, 53), lw = random_vec(C, 54), lb = random_vec(C, 55),
       dyc = random_vec(size_t(N) * C, 56), qkv = random_vec(size_t(N) * 3 * C, 57);
  std::vector<int32_t> tok(N);
  for (int i = 0; i < N; i++) tok[i] = (i * 7) % 13;  // heavy collisions in dwte
  auto run_all = [&]() {
    std::vector<VecF> r;
    VecF dinp(size_t(N) * C), dw(w.size(), 0.0f), db(OC, 0.0f);
    be->matmul_backward(dinp.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), N, C, OC,
                        false, true);
    r.insert(r.end(), {dinp, dw, db});
    VecF out(size_t(N) * C), mean(N), rstd(N), dx(size_t(N) * C, 0.0f), dlw(C, 0.0f), dlb(C, 0.0f);
    be->layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), lw.data(), lb.data(), N,
                          C);
    be->layernorm_backward(dx.data(), dx.data(), dlw.data(), dlb.data(), dyc.data(), x.data(), lw.data(),
                           mean.data(), rstd.data(), N, C);
    r.insert(r.end(), {out, dx, dlw, dlb});
    VecF aout(size_t(N) * C), att(size_t(B) * NH * T * T), dqkv(qkv.size());
    be->attention_forward(aout.data(), att.data(), qkv.data(), B, T, C, NH);
    be->attention_backward(dqkv.data(), dyc.data(), /*out, unused by the CPU*/ nullptr, qkv.data(), att.data(), B, T, C, NH);
    r.insert(r.end(), {aout, att, dqkv});
    VecF dwte(size_t(V) * C, 0.0f), dwpe(size_t(T) * C, 0.0f);
    be->embedding_backward(dwte.data(), dwpe.data(), dyc.data(), tok.data(), nullptr, B, T, C, 0, V);
    r.insert(r.end(), {dwte, dwpe});
    VecF losses(N), dl(dy.size());
    be->softmax_cross_entropy(losses.data(), dl.data(), dy.data(), tok.data(), N, OC - 3, OC,
                              0.01f);
    r.insert(r.end(), {losses, dl});
    return r;
  };
  auto first = run_all(), second = run_all();
  ASSERT_EQ(first.size(), second.size());
  for (size_t i = 0; i < first.size(); i++)
    EXPECT_TRUE(same_bits(first[i], second[i])) << "output " << i;
}

}  // namespace
}  // namespace baton
