// What tests/gpu/test_bf16_kernels.cpp (run emulated as unit.test_bf16_kernels_emulated) does not
// reach, on the emulated kernel library (baton_kernels_emulated + the runtime shim):
//   - the fp32 kernels through their launchers (elementwise, GELU, layernorm, embedding,
//     classifier), AdamW and the reductions of kernels/reduce.cu (sum_squares over several
//     chunks, accumulate_sum, column_sum with its 2-D (32, 8) blocks and 2-D grids), against
//     references in double. On a GPU these are tested against the CPU backend by
//     tests/gpu/test_cuda_ops.cpp, which needs cuBLAS and so cannot run emulated.
//   - the emulator's own rules: launch-configuration errors through cudaGetLastError, the dynamic
//     shared memory opt-in, static __shared__ per block, __launch_bounds__, deadlock reports, and
//     a negative control: a missing __syncthreads must change the results under both schedules.
//
// Tolerances: exact where the kernel does one IEEE operation per element (elementwise, embedding
// forward) or the reference repeats the kernel's fp32 expression and order (AdamW, GELU: same
// expression, host tanhf); kSum = 1e-5 relative Frobenius for fp32 sums of <= ~10^4 terms in
// another order than the double reference (layernorm statistics and gradients, column sums,
// softmax sums; ~1e-6 expected); 1e-12 for the double sums of sum_squares / accumulate_sum.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda_emu.h"
#include "kernels/adamw.cuh"
#include "kernels/sgd.cuh"
#include "kernels/classifier.cuh"
#include "kernels/elementwise.cuh"
#include "kernels/embedding.cuh"
#include "kernels/gelu.cuh"
#include "kernels/layernorm.cuh"
#include "kernels/reduce.cuh"

namespace baton::kernels {
namespace {

constexpr double kSum = 1e-5, kDoubleSum = 1e-12;

}  // namespace
}  // namespace baton::kernels
// The runtime shim's count of cudaGetLastError calls: one per launch, as every launcher checks each
// launch (cuda_emu_runtime.cpp).
extern "C" long long cuda_emu_launch_checks(void);
namespace baton::kernels {
namespace {

// Kernel launches `f` makes.
template <class F>
long long launches(F&& f) {
  const long long before = cuda_emu_launch_checks();
  f();
  return cuda_emu_launch_checks() - before;
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// A device buffer of the runtime shim (cudaMalloc: 256-byte aligned host memory).
template <typename T>
struct Dev {
  T* p = nullptr;
  size_t n;
  explicit Dev(size_t n_) : n(n_) { check(cudaMalloc(reinterpret_cast<void**>(&p), std::max<size_t>(n, 1) * sizeof(T)), "cudaMalloc"); }
  explicit Dev(const std::vector<T>& h) : Dev(h.size()) {
    check(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  ~Dev() { cudaFree(p); }
  std::vector<T> get() const {
    std::vector<T> h(n);
    check(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
    return h;
  }
};

std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.0f, float shift = 0.0f) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> nd;
  std::vector<float> v(n);
  for (auto& x : v) x = shift + scale * nd(g);
  return v;
}

template <typename T>
void expect_rel(const std::vector<T>& got, const std::vector<double>& ref, double tol,
                const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); i++) {
    num += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
    den += ref[i] * ref[i];
  }
  const double e = den > 0 ? std::sqrt(num / den) : std::sqrt(num);  // NaN fails
  EXPECT_LE(e, tol) << what << ": relative Frobenius error " << e << " over " << ref.size();
}
void expect_bits(const std::vector<float>& got, const std::vector<float>& ref, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < ref.size(); i++)
    if (std::memcmp(&got[i], &ref[i], sizeof(float)) != 0 && bad++ == 0) first = i;
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << ref.size() << " differ, first at " << first
                     << " (" << (bad ? got[first] : 0.0f) << " vs " << (bad ? ref[first] : 0.0f) << ")";
}

// ---- fp32 elementwise and GELU ---------------------------------------------------------------

TEST(KernelsEmulated, ElementwiseFp32IsExact) {
  for (size_t n : {size_t(1), size_t(255), size_t(256), size_t(70001)}) {
    const std::vector<float> a = randn(n, n), b = randn(n, n + 1);
    const std::string sh = " n=" + std::to_string(n);
    Dev<float> da(a), db(b), o(n);
    std::vector<float> ref(n);
    residual(o.p, da.p, db.p, n, nullptr);
    for (size_t i = 0; i < n; i++) ref[i] = a[i] + b[i];
    expect_bits(o.get(), ref, "residual" + sh);
    add(o.p, da.p, n, nullptr);
    for (size_t i = 0; i < n; i++) ref[i] += a[i];
    expect_bits(o.get(), ref, "add" + sh);
    scale(o.p, -0.37f, n, nullptr);
    for (size_t i = 0; i < n; i++) ref[i] *= -0.37f;
    expect_bits(o.get(), ref, "scale" + sh);
    copy(da.p, o.p, n, nullptr);
    expect_bits(da.get(), ref, "copy" + sh);
    zero(o.p, n, nullptr);
    expect_bits(o.get(), std::vector<float>(n, 0.0f), "zero" + sh);
  }
}

TEST(KernelsEmulated, GeluFp32) {
  const float k = 0.7978845608028654f;
  for (size_t n : {size_t(1), size_t(1000), size_t(66000)}) {
    const std::vector<float> x = randn(n, 3 * n, 2.0f), dy = randn(n, 3 * n + 1);
    std::vector<float> f(n), g(n);
    for (size_t i = 0; i < n; i++) {  // the kernels' expressions, in fp32
      const float v = x[i];
      f[i] = 0.5f * v * (1.0f + tanhf(k * (v + 0.044715f * v * v * v)));
      const float th = tanhf(k * (v + 0.044715f * v * v * v));
      g[i] = (0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * (k * (1.0f + 3.0f * 0.044715f * v * v))) * dy[i];
    }
    Dev<float> dx(x), ddy(dy), o(n), gi(n);
    gelu_forward(o.p, dx.p, n, nullptr);
    gelu_backward(gi.p, dx.p, ddy.p, n, nullptr);
    std::vector<double> fd(f.begin(), f.end()), gd(g.begin(), g.end());
    expect_rel(o.get(), fd, 1e-6, "gelu_forward n=" + std::to_string(n));
    expect_rel(gi.get(), gd, 1e-6, "gelu_backward n=" + std::to_string(n));
  }
}

// ---- layernorm fp32 --------------------------------------------------------------------------

TEST(KernelsEmulated, LayernormFp32) {
  // The backward's shapes: one row; rows shorter and longer than a warp; C = 2000 (3 warps per
  // block), 7000 (one warp, 56000 bytes of shared memory: the opt-in); N = 5000 (157 row chunks;
  // chunks of more than 32 rows: LayernormBackwardBf16ManyRowChunks).
  for (auto [N, C] : std::vector<std::pair<int, int>>{
           {1, 1}, {3, 7}, {9, 33}, {70, 768}, {130, 40}, {1, 2000}, {5, 7000}, {5000, 24}}) {
    const std::string sh = " " + std::to_string(N) + "x" + std::to_string(C);
    const size_t NC = size_t(N) * C;
    const std::vector<float> a = randn(NC, N + C, 2.0f, 0.5f), b = randn(NC, N + C + 1, 0.5f),
                             w = randn(C, C + 2, 0.1f, 1.0f), bias = randn(C, C + 3, 0.1f),
                             dy = randn(NC, N + C + 4), dinp0 = randn(NC, N + C + 5, 0.5f),
                             dw0 = randn(C, C + 6), db0 = randn(C, C + 7);
    std::vector<float> x(NC);
    for (size_t i = 0; i < NC; i++) x[i] = a[i] + b[i];
    std::vector<double> out(NC), mean(N), rstd(N), dinp(NC), dw(dw0.begin(), dw0.end()),
        db(db0.begin(), db0.end());
    for (int n = 0; n < N; n++) {
      const float* r = &x[size_t(n) * C];
      double m = 0, v = 0;
      for (int c = 0; c < C; c++) m += r[c];
      m /= C;
      for (int c = 0; c < C; c++) v += (r[c] - m) * (r[c] - m);
      const double s = 1.0 / std::sqrt(v / C + 1e-5);
      mean[n] = m, rstd[n] = s;
      double gs = 0, gxs = 0;
      for (int c = 0; c < C; c++) {
        const size_t i = size_t(n) * C + c;
        const double xhat = (r[c] - m) * s, g = double(dy[i]) * w[c];
        out[i] = xhat * w[c] + bias[c];
        gs += g, gxs += g * xhat;
        dw[c] += double(dy[i]) * xhat;
        db[c] += dy[i];
      }
      for (int c = 0; c < C; c++) {
        const size_t i = size_t(n) * C + c;
        const double xhat = (r[c] - m) * s;
        dinp[i] = dinp0[i] + s * (double(dy[i]) * w[c] - gs / C - xhat * gxs / C);
      }
    }
    Dev<float> da(a), dbb(b), dwt(w), dbias(bias), res(NC), o(NC), m(N), s(N), ddy(dy);
    residual_layernorm_forward(res.p, o.p, m.p, s.p, da.p, dbb.p, dwt.p, dbias.p, N, C, nullptr);
    expect_bits(res.get(), x, "residual_layernorm_forward residual" + sh);
    expect_rel(o.get(), out, kSum, "residual_layernorm_forward out" + sh);
    expect_rel(m.get(), mean, kSum, "residual_layernorm_forward mean" + sh);
    expect_rel(s.get(), rstd, kSum, "residual_layernorm_forward rstd" + sh);
    Dev<float> o2(NC), m2(N), s2(N);
    layernorm_forward(o2.p, m2.p, s2.p, res.p, dwt.p, dbias.p, N, C, nullptr);
    expect_bits(o2.get(), o.get(), "layernorm_forward vs residual_layernorm_forward" + sh);
    const size_t ns = layernorm_backward_scratch_floats(N, C);
    std::vector<float> fused[3];  // mask 7's dinp, dweight, dbias: every other mask has their bits
    for (int mask : {7, 1, 2, 3, 4, 5, 6}) {  // bit 0 dinp, bit 1 dweight, bit 2 dbias
      Dev<float> di(dinp0), gw(dw0), gb(db0), scratch(ns);
      // One kernel reads dout and inp for all three outputs; a second adds the parameter partials.
      EXPECT_EQ(launches([&] {
                  layernorm_backward(mask & 1 ? di.p : nullptr, mask & 1 ? di.p : nullptr, mask & 2 ? gw.p : nullptr,
                                     mask & 4 ? gb.p : nullptr, ddy.p, res.p, dwt.p, m.p, s.p, N, C, scratch.p, ns,
                                     nullptr);
                }),
                mask == 1 ? 1 : 2)
          << sh << " mask " << mask;
      const std::string wm = sh + " mask " + std::to_string(mask);
      const std::vector<float> got[3] = {di.get(), gw.get(), gb.get()};
      if (mask == 7)
        for (int k = 0; k < 3; k++) fused[k] = got[k];
      if (mask & 1) expect_rel(got[0], dinp, kSum, "layernorm_backward dinp" + wm);
      else expect_bits(got[0], dinp0, "layernorm_backward dinp untouched" + wm);
      if (mask & 2) expect_rel(got[1], dw, kSum, "layernorm_backward dweight" + wm);
      else expect_bits(got[1], dw0, "layernorm_backward dweight untouched" + wm);
      if (mask & 4) expect_rel(got[2], db, kSum, "layernorm_backward dbias" + wm);
      else expect_bits(got[2], db0, "layernorm_backward dbias untouched" + wm);
      for (int k = 0; k < 3; k++)
        if (mask & (1 << k)) expect_bits(got[k], fused[k], "layernorm_backward split == fused, output " + std::to_string(k) + wm);
    }
    // dinp = dres + ... from another buffer: the in-place result's bits; null dres: zero first.
    Dev<float> in_place(dinp0), zeroed(std::vector<float>(NC, 0.0f)), dres(dinp0), other(NC), other0(NC);
    layernorm_backward(in_place.p, in_place.p, nullptr, nullptr, ddy.p, res.p, dwt.p, m.p, s.p, N, C, nullptr, 0,
                       nullptr);
    layernorm_backward(zeroed.p, zeroed.p, nullptr, nullptr, ddy.p, res.p, dwt.p, m.p, s.p, N, C, nullptr, 0,
                       nullptr);
    layernorm_backward(other.p, dres.p, nullptr, nullptr, ddy.p, res.p, dwt.p, m.p, s.p, N, C, nullptr, 0, nullptr);
    layernorm_backward(other0.p, nullptr, nullptr, nullptr, ddy.p, res.p, dwt.p, m.p, s.p, N, C, nullptr, 0,
                       nullptr);
    expect_bits(other.get(), in_place.get(), "layernorm_backward dinp = dres + ..." + sh);
    expect_bits(other0.get(), zeroed.get(), "layernorm_backward dinp = 0 + ..." + sh);
    expect_bits(dres.get(), dinp0, "layernorm_backward dres untouched" + sh);
  }
}

// The bf16 backward where tests/gpu/test_bf16_kernels.cpp's shapes stop (N <= 300): many row
// chunks, with 16-byte (C % 8 == 0) and element-wise rows, against a double reference from the same
// bf16 values and fp32 statistics; one kernel for everything plus the partials' finish.
TEST(KernelsEmulated, LayernormBackwardBf16ManyRowChunks) {
  for (auto [N, C] : std::vector<std::pair<int, int>>{{33000, 8}, {5000, 13}, {2100, 48}}) {
    const std::string sh = " " + std::to_string(N) + "x" + std::to_string(C);
    const size_t NC = size_t(N) * C;
    auto bf = [](const std::vector<float>& v) {
      std::vector<__nv_bfloat16> b(v.size());
      for (size_t i = 0; i < v.size(); i++) b[i] = __float2bfloat16_rn(v[i]);
      return b;
    };
    auto f = [](__nv_bfloat16 b) { return double(__bfloat162float(b)); };
    const std::vector<__nv_bfloat16> x = bf(randn(NC, N + C, 2.0f, 0.5f)), dy = bf(randn(NC, N + C + 1)),
                                     w = bf(randn(C, C + 2, 0.1f, 1.0f)), dinp0 = bf(randn(NC, N + C + 3, 0.5f));
    const std::vector<float> dw0 = randn(C, C + 4), db0 = randn(C, C + 5);
    std::vector<float> mean(N), rstd(N);
    std::vector<double> rdinp(NC), rdw(dw0.begin(), dw0.end()), rdb(db0.begin(), db0.end());
    for (int n = 0; n < N; n++) {
      double mu = 0, var = 0;
      for (int c = 0; c < C; c++) mu += f(x[size_t(n) * C + c]);
      mu /= C;
      for (int c = 0; c < C; c++) var += (f(x[size_t(n) * C + c]) - mu) * (f(x[size_t(n) * C + c]) - mu);
      mean[n] = float(mu);
      rstd[n] = float(1.0 / std::sqrt(var / C + 1e-5));
      const double m = mean[n], sd = rstd[n];
      double gs = 0, gxs = 0;
      for (int c = 0; c < C; c++) {
        const size_t i = size_t(n) * C + c;
        const double g = f(dy[i]) * f(w[c]), xhat = (f(x[i]) - m) * sd;
        gs += g, gxs += g * xhat;
        rdw[c] += f(dy[i]) * xhat;
        rdb[c] += f(dy[i]);
      }
      for (int c = 0; c < C; c++) {
        const size_t i = size_t(n) * C + c;
        const double xhat = (f(x[i]) - m) * sd;
        rdinp[i] = f(dinp0[i]) + sd * (f(dy[i]) * f(w[c]) - gs / C - xhat * gxs / C);
      }
    }
    const size_t ns = layernorm_backward_scratch_floats(N, C);
    Dev<__nv_bfloat16> dx(x), ddy(dy), dwt(w), di(dinp0), di2(dinp0);
    Dev<float> m(mean), s(rstd), gw(dw0), gb(db0), gw2(dw0), scratch(ns);
    EXPECT_EQ(launches([&] {
                layernorm_backward(di.p, di.p, gw.p, gb.p, ddy.p, dx.p, dwt.p, m.p, s.p, N, C, scratch.p, ns, nullptr);
              }),
              2)
        << sh;
    std::vector<float> got(NC);
    const std::vector<__nv_bfloat16> gdi = di.get();
    for (size_t i = 0; i < NC; i++) got[i] = __bfloat162float(gdi[i]);
    expect_rel(got, rdinp, 4e-3, "layernorm_backward bf16 dinp" + sh);  // one bf16 rounding
    expect_rel(gw.get(), rdw, kSum, "layernorm_backward bf16 dweight" + sh);
    expect_rel(gb.get(), rdb, kSum, "layernorm_backward bf16 dbias" + sh);
    // dinp alone: one launch, the fused call's bits; dweight alone: the fused call's bits.
    EXPECT_EQ(launches([&] {
                layernorm_backward(di2.p, di2.p, nullptr, nullptr, ddy.p, dx.p, dwt.p, m.p, s.p, N, C, nullptr, 0,
                                   nullptr);
              }),
              1)
        << sh;
    const std::vector<__nv_bfloat16> gdi2 = di2.get();
    EXPECT_EQ(std::memcmp(gdi.data(), gdi2.data(), NC * sizeof(gdi[0])), 0) << "dinp alone vs fused" << sh;
    layernorm_backward(static_cast<__nv_bfloat16*>(nullptr), nullptr, gw2.p, nullptr, ddy.p, dx.p, nullptr, m.p, s.p,
                       N, C, scratch.p, ns, nullptr);
    expect_bits(gw2.get(), gw.get(), "dweight alone vs fused" + sh);
  }
}

// Rows too long for one warp's column sums in shared memory (8 * C bytes > 227 KiB): a precondition.
TEST(KernelsEmulated, LayernormBackwardLongRowsArePrecondition) {
  const int N = 2, C = 30000;
  Dev<float> x(size_t(N) * C), ms(N), g(C);
  const size_t ns = layernorm_backward_scratch_floats(N, C);
  Dev<float> scratch(ns);
  EXPECT_THROW(layernorm_backward(nullptr, nullptr, g.p, nullptr, x.p, x.p, nullptr, ms.p, ms.p, N, C, scratch.p, ns,
                                  nullptr),
               std::invalid_argument);
  // dinp alone needs no shared sums: any C.
  Dev<float> w(C), di(size_t(N) * C);
  EXPECT_NO_THROW(layernorm_backward(di.p, nullptr, nullptr, nullptr, x.p, x.p, w.p, ms.p, ms.p, N, C, nullptr, 0,
                                     nullptr));
}

// ---- embedding fp32 --------------------------------------------------------------------------

TEST(KernelsEmulated, EmbeddingFp32) {
  const int B = 2, T = 7, N = B * T, C = 300, vocab_start = 5, rows = 11;
  std::vector<int32_t> tokens(N);
  std::mt19937_64 g(9);
  for (auto& t : tokens) t = int32_t(g() % 20);
  tokens[1] = -3;
  tokens[2] = tokens[9] = tokens[12] = 7;  // one row from several positions
  const std::vector<float> wte = randn(size_t(rows) * C, 1), wpe = randn(size_t(T) * C, 2),
                           dout = randn(size_t(N) * C, 3), dwte0 = randn(size_t(rows) * C, 4),
                           dwpe0 = randn(size_t(T) * C, 5);
  std::vector<float> out(size_t(N) * C), rwte = dwte0, rwpe = dwpe0;
  for (int n = 0; n < N; n++) {
    const int r = tokens[n] - vocab_start;
    const bool in = tokens[n] >= 0 && r >= 0 && r < rows;
    for (int c = 0; c < C; c++) {
      out[size_t(n) * C + c] = (in ? wte[size_t(r) * C + c] : 0.0f) + wpe[size_t(n % T) * C + c];
      if (in) rwte[size_t(r) * C + c] += dout[size_t(n) * C + c];  // positions ascending
    }
  }
  for (int t = 0; t < T; t++)
    for (int c = 0; c < C; c++)
      for (int b = 0; b < B; b++) rwpe[size_t(t) * C + c] += dout[(size_t(b) * T + t) * C + c];
  Dev<int32_t> dt(tokens);
  Dev<float> dwte(wte), dwpe(wpe), o(size_t(N) * C), ddout(dout), gw(dwte0), gp(dwpe0);
  embedding_forward(o.p, dt.p, dwte.p, dwpe.p, B, T, C, vocab_start, rows, nullptr);
  expect_bits(o.get(), out, "embedding_forward");
  const size_t ni = embedding_backward_scratch_ints(N);
  Dev<int32_t> scratch(ni);
  embedding_backward(gw.p, gp.p, ddout.p, tokens.data(), B, T, C, vocab_start, rows, scratch.p, ni, nullptr);
  expect_bits(gw.get(), rwte, "embedding_backward dwte");
  expect_bits(gp.get(), rwpe, "embedding_backward dwpe");
}

// ---- classifier fp32 -------------------------------------------------------------------------

TEST(KernelsEmulated, ClassifierFp32) {
  const int N = 4, V = 1500, Vp = 1504;
  std::vector<float> x = randn(size_t(N) * Vp, 11, 2.0f);
  for (int n = 0; n < N; n++)
    for (int v = V; v < Vp; v++) x[size_t(n) * Vp + v] = 1000.0f;  // padding: ignored
  const std::vector<int32_t> targets = {3, -1, V - 1, 700};
  const float dloss = 0.25f;
  std::vector<double> loss(N, 0.0), grad(size_t(N) * Vp, 0.0), maxv(N), sumexp(N);
  for (int n = 0; n < N; n++) {
    const float* r = &x[size_t(n) * Vp];
    double m = -INFINITY, s = 0;
    for (int v = 0; v < V; v++) m = std::max(m, double(r[v]));
    for (int v = 0; v < V; v++) s += std::exp(r[v] - m);
    maxv[n] = m, sumexp[n] = s;
    if (targets[n] < 0) continue;
    loss[n] = std::log(s) + m - r[targets[n]];
    for (int v = 0; v < V; v++)
      grad[size_t(n) * Vp + v] = (std::exp(r[v] - m) / s - (v == targets[n] ? 1.0 : 0.0)) * dloss;
  }
  Dev<float> dx(x), dl(N), dg(size_t(N) * Vp);
  Dev<int32_t> dt(targets);
  softmax_cross_entropy(dl.p, dg.p, dx.p, dt.p, N, V, Vp, dloss, nullptr);
  expect_rel(dl.get(), loss, kSum, "softmax_cross_entropy losses");
  expect_rel(dg.get(), grad, kSum, "softmax_cross_entropy dlogits");
  // The vocab-parallel passes over the whole row as one shard (Vl = Vp, V_local = V).
  Dev<float> dm(N), ds(N), dtl(N), dl2(N), dg2(size_t(N) * Vp);
  logits_row_max(dm.p, dx.p, N, V, Vp, nullptr);
  expect_rel(dm.get(), maxv, 0.0, "logits_row_max");
  logits_sumexp_target(ds.p, dtl.p, dx.p, dm.p, dt.p, N, V, Vp, 0, nullptr);
  expect_rel(ds.get(), sumexp, kSum, "logits_sumexp_target sumexp");
  cross_entropy_finish(dl2.p, dg2.p, dx.p, dm.p, ds.p, dtl.p, dt.p, N, V, Vp, 0, dloss, nullptr);
  expect_rel(dl2.get(), loss, kSum, "cross_entropy_finish losses");
  expect_rel(dg2.get(), grad, kSum, "cross_entropy_finish dlogits");
}

// ---- AdamW and reductions --------------------------------------------------------------------

TEST(KernelsEmulated, AdamWIsTheFormula) {
  const size_t n = 5000;
  const std::vector<float> p0 = randn(n, 21), gr = randn(n, 22), m0 = randn(n, 23, 0.1f);
  std::vector<float> v0 = randn(n, 24, 0.01f);
  for (auto& v : v0) v = std::fabs(v);
  const AdamWParams p{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 0.19f, 0.0975f};
  std::vector<float> rp = p0, rm = m0, rv = v0;
  for (size_t i = 0; i < n; i++) {  // kernels/adamw.cu's expression order
    const float g = gr[i] * p.grad_scale;
    rm[i] = p.beta1 * rm[i] + (1.0f - p.beta1) * g;
    rv[i] = p.beta2 * rv[i] + (1.0f - p.beta2) * g * g;
    const float mhat = rm[i] / p.bc1, vhat = rv[i] / p.bc2;
    rp[i] -= p.lr * (mhat / (sqrtf(vhat) + p.eps) + p.weight_decay * rp[i]);
  }
  Dev<float> dp(p0), dg(gr), dm(m0), dv(v0);
  adamw_step(dp.p, dg.p, dm.p, dv.p, n, p, nullptr);
  expect_bits(dm.get(), rm, "adamw m");
  expect_bits(dv.get(), rv, "adamw v");
  expect_bits(dp.get(), rp, "adamw param");
}

// The multi-tensor AdamW: one launch whatever the number of tensors, each tensor's results the bits
// of adamw_step on it alone (with its own weight decay); the gaps between tensors untouched.
TEST(KernelsEmulated, AdamWMultiTensorIsOneLaunchOfThePerTensorBits) {
  // Lengths around the 2048-element chunk, empty ones (first, inside, last) and one of many chunks.
  const std::vector<size_t> lens = {0, 1, 2047, 2048, 0, 2049, 5000, 70001, 3, 0};
  std::vector<AdamWTensor> t;
  size_t flat = 7, state = 0;  // params with gaps (odd offsets), state back to back
  for (size_t i = 0; i < lens.size(); i++) {
    AdamWTensor e;
    e.param_offset = flat;
    e.state_offset = state;
    e.n = lens[i];
    e.weight_decay = i % 3 == 0 ? 0.0f : 0.1f * float(i);
    t.push_back(e);
    flat += lens[i] + 5;
    state += lens[i];
  }
  const size_t blocks = adamw_multi_plan(t.data(), t.size());
  size_t expect_blocks = 0;
  for (size_t n : lens) expect_blocks += (n + kAdamWChunk - 1) / kAdamWChunk;
  EXPECT_EQ(blocks, expect_blocks);
  const std::vector<float> p0 = randn(flat, 41), gr = randn(flat, 42), m0 = randn(state, 43, 0.1f);
  std::vector<float> v0 = randn(state, 44, 0.01f);
  for (auto& v : v0) v = std::fabs(v);
  const AdamWParams p{1e-3f, 0.9f, 0.95f, 1e-8f, 123.0f /* unused: per tensor */, 0.7f, 0.271f, 0.0975f};
  // Reference: adamw_step per tensor (a launch each).
  Dev<float> rp(p0), rg(gr), rm(m0), rv(v0);
  for (const AdamWTensor& e : t) {
    AdamWParams q = p;
    q.weight_decay = e.weight_decay;
    adamw_step(rp.p + e.param_offset, rg.p + e.param_offset, rm.p + e.state_offset, rv.p + e.state_offset, e.n, q,
               nullptr);
  }
  Dev<float> dp(p0), dg(gr), dm(m0), dv(v0);
  Dev<AdamWTensor> table(t);
  const long long before = cuda_emu_launch_checks();
  adamw_step_multi(dp.p, dg.p, dm.p, dv.p, table.p, t.size(), blocks, p, nullptr);
  EXPECT_EQ(cuda_emu_launch_checks() - before, 1) << "one launch for " << t.size() << " tensors";
  expect_bits(dp.get(), rp.get(), "adamw_step_multi params (gaps untouched)");
  expect_bits(dm.get(), rm.get(), "adamw_step_multi m");
  expect_bits(dv.get(), rv.get(), "adamw_step_multi v");
  expect_bits(dg.get(), gr, "adamw_step_multi grads untouched");
  // The per-tensor weight decay is used: a mutation applying p.weight_decay would differ.
  bool changed = false;
  for (size_t i = 0; i < p0.size() && !changed; i++) changed = dp.get()[i] != p0[i];
  EXPECT_TRUE(changed);
  // Only empty tensors: no launch at all.
  std::vector<AdamWTensor> empty(3);
  EXPECT_EQ(adamw_multi_plan(empty.data(), empty.size()), 0u);
  Dev<AdamWTensor> etable(empty);
  const long long before_empty = cuda_emu_launch_checks();
  adamw_step_multi(dp.p, dg.p, dm.p, dv.p, etable.p, empty.size(), 0, p, nullptr);
  EXPECT_EQ(cuda_emu_launch_checks() - before_empty, 0);
  EXPECT_THROW(adamw_step_multi(dp.p, dg.p, dm.p, dv.p, nullptr, t.size(), blocks, p, nullptr), std::invalid_argument);
}

// SGD (momentum, Nesterov, L2 or decoupled decay): kernels/sgd.cu's (and cpu_sgd.cpp's) fp32
// expression order, bit for bit.
TEST(KernelsEmulated, SgdIsTheFormula) {
  const size_t n = 5000;
  for (const SgdParams& p : {SgdParams{1e-2f, 0.9f, 0.0f, 5e-4f, 0.5f, 0}, SgdParams{1e-2f, 0.9f, 1e-4f, 0.0f, 1.0f, 1},
                             SgdParams{3e-2f, 0.0f, 0.0f, 0.0f, 1.0f, 0}}) {
    const std::vector<float> p0 = randn(n, 31), gr = randn(n, 32), b0 = randn(n, 33, 0.1f);
    std::vector<float> rp = p0, rb = b0;
    for (size_t i = 0; i < n; i++) {
      const float w = rp[i];
      float g = gr[i] * p.grad_scale + p.l2 * w;
      if (p.momentum != 0.0f) {
        rb[i] = p.momentum * rb[i] + g;
        g = p.nesterov ? g + p.momentum * rb[i] : rb[i];
      }
      rp[i] = w - p.lr * (g + p.decoupled * w);
    }
    Dev<float> dp(p0), dg(gr), db(b0);
    sgd_step(dp.p, dg.p, db.p, n, p, nullptr);
    expect_bits(dp.get(), rp, "sgd param");
    expect_bits(db.get(), rb, "sgd momentum buffer");
  }
}

TEST(KernelsEmulated, SumSquaresAndAccumulateSum) {
  for (size_t n : {size_t(0), size_t(1), size_t(16384), size_t(16385), size_t(100003)}) {
    const std::vector<float> x = randn(n, n + 31);
    double ref = 0, sum = 0.5;
    for (float v : x) ref += double(v) * v, sum += v;
    Dev<float> dx(x);
    const size_t ns = sum_squares_scratch_doubles(n);
    Dev<double> scratch(ns), acc(std::vector<double>{0.5});
    sum_squares(scratch.p + ns - 1, dx.p, n, scratch.p, ns, nullptr);  // result in the scratch's end
    expect_rel(std::vector<double>{scratch.get()[ns - 1]}, {ref}, kDoubleSum, "sum_squares n=" + std::to_string(n));
    accumulate_sum(acc.p, dx.p, n, nullptr);
    expect_rel(acc.get(), {sum}, kDoubleSum, "accumulate_sum n=" + std::to_string(n));
  }
}

// The gradient norm's span table: two launches for any number of spans, each span's result the
// bits of sum_squares on it alone (the contract Backend::sum_squares_spans keeps by adding them in
// span order on the host).
TEST(KernelsEmulated, SumSquaresSpansAreThePerSpanBitsInTwoLaunches) {
  const size_t n = 400001;
  const std::vector<float> x = randn(n, 51);
  Dev<float> dx(x);
  const std::vector<std::vector<std::pair<size_t, size_t>>> lists = {
      {{5, 1}},
      {{0, 0}, {0, 1}, {16, 12345}, {20000, 0}, {20032, 200000}, {220032, 16384}, {236416, 16385}, {252801, 147200},
       {n, 0}},
      {{3, 0}, {9, 0}}};
  for (const auto& list : lists) {
    std::vector<SumSqSpan> spans;
    for (const auto& [o, k] : list) spans.push_back({o, k, 0});
    const size_t chunks = sum_squares_spans_plan(spans.data(), spans.size());
    Dev<SumSqSpan> table(spans);
    Dev<double> partials(chunks), results(spans.size());
    const long long before = cuda_emu_launch_checks();
    sum_squares_spans(results.p, dx.p, table.p, spans.size(), chunks, partials.p, nullptr);
    EXPECT_EQ(cuda_emu_launch_checks() - before, chunks > 0 ? 2 : 1) << spans.size() << " spans";
    const std::vector<double> got = results.get();
    for (size_t i = 0; i < spans.size(); i++) {
      const size_t ns = sum_squares_scratch_doubles(spans[i].n);
      Dev<double> scratch(ns);
      sum_squares(scratch.p + ns - 1, dx.p + spans[i].offset, spans[i].n, scratch.p, ns, nullptr);
      EXPECT_EQ(got[i], scratch.get()[ns - 1]) << "span " << i << " of " << spans.size();
      double ref = 0;
      for (size_t j = 0; j < spans[i].n; j++) ref += double(x[spans[i].offset + j]) * x[spans[i].offset + j];
      expect_rel(std::vector<double>{got[i]}, {ref}, kDoubleSum, "sum_squares_spans span " + std::to_string(i));
    }
  }
}

// dst[c] + the column sums in the kernels' documented order (reduce.cu): per row chunk, 8 fp32
// strands (rows r0 + k, r0 + k + 8, ...) added in strand order; the chunks' sums in chunk order.
template <typename T, typename ToF>
std::vector<float> column_sum_in_order(const std::vector<T>& x, const std::vector<float>& d0, int N, int C, ToF to_f) {
  const int rows = column_chunk_rows(N), chunks = (N + rows - 1) / rows;
  std::vector<float> out(C);
  for (int c = 0; c < C; c++) {
    float total = 0.0f;
    for (int ch = 0; ch < chunks; ch++) {
      const int r0 = ch * rows, r1 = std::min(N, r0 + rows);
      float part = 0.0f;
      for (int k = 0; k < 8; k++) {
        float strand = 0.0f;
        for (int r = r0 + k; r < r1; r += 8) strand += to_f(x[size_t(r) * C + c]);
        part += strand;
      }
      total += part;
    }
    out[c] = d0[c] + total;
  }
  return out;
}

// The bias gradients' column sums, fp32 and bf16 input: 16-byte loads where C is a multiple of the
// vector (4 fp32, 8 bf16) and the input 16-byte aligned, element-wise otherwise (odd C, or the input
// one element off): both the documented fixed order, bit for bit, and within kSum of the sums in
// double. N = 4161: 65-row chunks, 64 of them; C = 70: a partial last vector and a partial block.
TEST(KernelsEmulated, ColumnSumOverRowChunks) {
  for (auto [N, C] : std::vector<std::pair<int, int>>{
           {1, 1}, {1, 8}, {63, 33}, {64, 32}, {300, 5}, {300, 36}, {4161, 70}, {4161, 264}, {20000, 16}}) {
    const std::string sh = " " + std::to_string(N) + "x" + std::to_string(C);
    const std::vector<float> x = randn(size_t(N) * C, N + C), d0 = randn(C, C);
    std::vector<__nv_bfloat16> xb(x.size());
    for (size_t i = 0; i < x.size(); i++) xb[i] = __float2bfloat16_rn(x[i]);
    std::vector<double> ref(d0.begin(), d0.end()), refb(d0.begin(), d0.end());
    for (int n = 0; n < N; n++)
      for (int c = 0; c < C; c++) {
        ref[c] += x[size_t(n) * C + c];
        refb[c] += double(__bfloat162float(xb[size_t(n) * C + c]));
      }
    const std::vector<float> order = column_sum_in_order(x, d0, N, C, [](float v) { return v; });
    const std::vector<float> orderb =
        column_sum_in_order(xb, d0, N, C, [](__nv_bfloat16 v) { return __bfloat162float(v); });
    const size_t ns = column_sum_scratch_floats(N, C);
    Dev<float> scratch(ns);
    for (size_t off : {0, 1}) {  // off = 1: the input one element past a 16-byte boundary
      const std::string what = sh + " offset " + std::to_string(off);
      std::vector<float> xo(off, 0.0f);
      xo.insert(xo.end(), x.begin(), x.end());
      std::vector<__nv_bfloat16> xbo(off, __float2bfloat16_rn(0.0f));
      xbo.insert(xbo.end(), xb.begin(), xb.end());
      Dev<float> dx(xo), dst(d0);
      EXPECT_EQ(launches([&] { column_sum(dst.p, dx.p + off, N, C, true, scratch.p, ns, nullptr); }), 2) << what;
      expect_bits(dst.get(), order, "column_sum fixed order" + what);
      expect_rel(dst.get(), ref, kSum, "column_sum" + what);
      Dev<__nv_bfloat16> dxb(xbo);
      Dev<float> dstb(d0);
      EXPECT_EQ(launches([&] { column_sum(dstb.p, dxb.p + off, N, C, true, scratch.p, ns, nullptr); }), 2) << what;
      expect_bits(dstb.get(), orderb, "column_sum bf16 fixed order" + what);
      expect_rel(dstb.get(), refb, kSum, "column_sum bf16" + what);
      // Overwrite (the first micro-batch's bias gradient): the old contents are never read — the
      // bits of adding onto zeros.
      const std::vector<float> zeros(C, 0.0f), nans(C, std::nanf(""));
      Dev<float> dstw(nans);
      EXPECT_EQ(launches([&] { column_sum(dstw.p, dx.p + off, N, C, false, scratch.p, ns, nullptr); }), 2) << what;
      expect_bits(dstw.get(), column_sum_in_order(x, zeros, N, C, [](float v) { return v; }),
                  "column_sum overwrite" + what);
    }
  }
}

// ---- the emulator's rules --------------------------------------------------------------------

void noop_kernel(int) {}
void smem_kernel(float* out) {
  float* sh = cuda_emu::dynamic_smem<float>();
  sh[threadIdx.x] = float(threadIdx.x);
  cuda_emu::syncthreads();
  out[threadIdx.x] = sh[(threadIdx.x + 1) % blockDim.x];
}

TEST(CudaEmu, LaunchConfigurationErrorsGoToCudaGetLastError) {
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  cuda_emu::launch_kernel(noop_kernel, dim3(1), dim3(1025), 0, nullptr, 1);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // read and reset
  cuda_emu::launch_kernel(noop_kernel, dim3(1, 65536), dim3(32), 0, nullptr, 1);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  cuda_emu::launch_kernel(noop_kernel, dim3(0), dim3(32), 0, nullptr, 1);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  cuda_emu::launch_kernel(noop_kernel, dim3(2, 3), dim3(32, 8), 0, nullptr, 1);  // 2-D
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  // Dynamic shared memory above 48 KiB only after the kernel's opt-in, up to 227 KiB.
  const int n = 64 * 1024 / 4;
  Dev<float> out(n);
  cuda_emu::launch_kernel(smem_kernel, dim3(1), dim3(1024), n * 4, nullptr, out.p);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFuncSetAttribute(smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 228 * 1024),
            cudaErrorInvalidValue);
  (void)cudaGetLastError();
  ASSERT_EQ(cudaFuncSetAttribute(smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, n * 4), cudaSuccess);
  cuda_emu::launch_kernel(smem_kernel, dim3(1), dim3(1024), n * 4, nullptr, out.p);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(out.get()[1023], 0.0f);
  int optin = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0), cudaSuccess);
  EXPECT_EQ(optin, 232448);
}

// Static __shared__ as the generator rewrites it: one instance per block, shared by its threads,
// NaN-filled at the start of every block.
void static_smem_kernel(float* out) {
  static constexpr char tag = 0;
  float (&sh)[64] = cuda_emu::static_smem<float[64], alignof(float)>(&tag);
  const float before = sh[threadIdx.x];
  cuda_emu::syncthreads();
  sh[threadIdx.x] = float(blockIdx.x * 100 + threadIdx.x);
  cuda_emu::syncthreads();
  out[blockIdx.x * 128 + threadIdx.x] = sh[63 - threadIdx.x];
  out[blockIdx.x * 128 + 64 + threadIdx.x] = before;
}

TEST(CudaEmu, StaticSharedIsPerBlockAndStartsAsNaN) {
  Dev<float> out(3 * 128);
  cuda_emu::launch_kernel(static_smem_kernel, dim3(3), dim3(64), 0, nullptr, out.p);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<float> o = out.get();
  for (int b = 0; b < 3; b++)
    for (int t = 0; t < 64; t++) {
      EXPECT_EQ(o[b * 128 + t], float(b * 100 + 63 - t)) << b << " " << t;
      EXPECT_TRUE(std::isnan(o[b * 128 + 64 + t])) << "block " << b << " saw a previous block's value";
    }
}

void bounded_kernel() { cuda_emu::launch_bounds(256); }
void deadlock_kernel() {
  float v = 1.0f;
  if (threadIdx.x % 32 < 16) v = cuda_emu::shfl_xor_sync(0xffffffffu, v, 1);  // half the warp
  cuda_emu::syncthreads();
}
// Reads a neighbour's shared value without the barrier in between: must not pass for the
// neighbour in another warp under either schedule (block 0 forward, block 1 reverse).
void racy_kernel(float* out) {
  float* sh = cuda_emu::dynamic_smem<float>();
  sh[threadIdx.x] = 1.0f;
  out[blockIdx.x * blockDim.x + threadIdx.x] = sh[(threadIdx.x + 32) % blockDim.x];
}

TEST(CudaEmu, LaunchBoundsDeadlocksAndRacesAreReported) {
  EXPECT_THROW(cuda_emu::launch_kernel(bounded_kernel, dim3(1), dim3(512), 0, nullptr), std::runtime_error);
  cuda_emu::launch_kernel(bounded_kernel, dim3(1), dim3(256), 0, nullptr);
  try {
    cuda_emu::launch_kernel(deadlock_kernel, dim3(1), dim3(64), 0, nullptr);
    ADD_FAILURE() << "no deadlock reported";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("deadlock"), std::string::npos) << e.what();
  }
  Dev<float> out(2 * 64);
  cuda_emu::launch_kernel(racy_kernel, dim3(2), dim3(64), 64 * sizeof(float), nullptr, out.p);
  const std::vector<float> o = out.get();
  int nan0 = 0, nan1 = 0;
  for (int t = 0; t < 64; t++) nan0 += std::isnan(o[t]), nan1 += std::isnan(o[64 + t]);
  EXPECT_EQ(nan0, 32) << "forward schedule: warp 0 should read warp 1's values before they exist";
  EXPECT_EQ(nan1, 32) << "reverse schedule: warp 1 should read warp 0's values before they exist";
}

TEST(CudaEmu, DeviceMinMaxAreCudas) {
  EXPECT_EQ(min(size_t(3), size_t(5)), size_t(3));
  EXPECT_EQ(min(-1, 2u), 2u);  // CUDA's min(int, unsigned) compares as unsigned
  EXPECT_EQ(max(2.0f, NAN), 2.0f);
  EXPECT_EQ(min(NAN, -2.0f), -2.0f);
}

}  // namespace
}  // namespace baton::kernels
