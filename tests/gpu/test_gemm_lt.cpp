// cuBLASLt GEMMs (kernels/gemm_lt.cuh) and the bf16 dense layer (kernels/matmul_bf16.cuh) against a
// double-precision CPU reference computed here on the same (bf16-rounded) inputs: every LtGemm
// mode (types x epilogues x transposes x fused/fallback, odd shapes, padded leading dimensions,
// misaligned pointers), matmul_forward_bf16 (bias / GELU combinations, fused and unfused) and
// matmul_backward_bf16 (every null-output combination, accumulate_dinp, DGELU fused and unfused),
// the GPT-2 shapes (N = 8192, C = 768, OC = 2304 / 3072 / 768, fc_proj C = 3072, LM head OC = 50304),
// determinism (same call twice -> identical bits), the heuristic cache, the form of cuBLASLt's GELU,
// and the launchers' preconditions. Label `gpu`; every test skips with "skipped: no CUDA device"
// where cudaGetDeviceCount reports none.
//
// Error measure: relative Frobenius norm ||got - ref|| / ||ref|| over the checked rows (all rows of
// small outputs; 48 fixed rows of large ones: the reference is a naive double GEMM). NaN never
// passes. Tolerances, and why:
//   kBf16Once   2^-8    a bf16 result rounded once from the fp32 accumulator: bf16 has 8 significant
//                       bits, so each element is off by <= 2^-8 relative (u = 2^-8); fp32
//                       accumulation (~1e-6) is invisible next to it.
//   kBf16Twice  2^-7    bf16 results through two roundings or a rounded value fed to a function:
//                       fallback epilogues (GEMM rounded to bf16, then bias/GELU/DGELU rounded again),
//                       GELU of the pre-activation, DGELU products (<= 2u per element).
//   f32_tol(K)  2e-6 sqrt(K)   fp32 outputs (bf16 or fp32 inputs, fp32 accumulation): products of bf16
//                       are exact in fp32, so only the summation order of K terms differs from the
//                       double reference: ~u32 sqrt(K) with u32 = 6e-8 (random-walk rounding), 33x
//                       margin. TF32 (2^-11 per product) would fail it at the small K used for fp32.
//   kLtGelu     1e-3    fp32 outputs of cuBLASLt's fused GELU/DGELU: the library does not document
//                       its tanh implementation (a fast tanh would be ~5e-4); layout, bias or aux
//                       mistakes give O(1) errors. The form itself is checked in GeluEpilogueForm.
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "../support/gpu_test.h"
#include "kernels/gemm_lt.cuh"
#include "kernels/matmul_bf16.cuh"

namespace baton::kernels {
namespace {

constexpr double kBf16Once = 1.0 / 256, kBf16Twice = 1.0 / 128, kLtGelu = 1e-3;
constexpr double kPi = 3.14159265358979323846;
double f32_tol(long long K) { return 2e-6 * std::sqrt(double(K)); }

// ---- bf16 on the host (round to nearest even), random data ----------------------------------
uint16_t f2bf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
float bf2f(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct Rand {
  uint64_t s;
  explicit Rand(uint64_t seed) : s(seed * 0x9e3779b97f4a7c15ull + 1) {}
  uint64_t next() {  // splitmix64
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return double(next() >> 11) * (2.0 / 9007199254740992.0) - 1.0; }  // [-1, 1)
};

// Uniform in [-scale, scale), rounded to bf16 when the tensor is bf16 (the reference then uses
// exactly what the GPU reads).
std::vector<float> rnd(size_t n, uint64_t seed, double scale, bool bf16) {
  Rand r(seed);
  std::vector<float> v(n);
  for (auto& x : v) {
    x = float(scale * r.uniform());
    if (bf16) x = bf2f(f2bf(x));
  }
  return v;
}

double gelu_ref(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / kPi) * (x + 0.044715 * x * x * x)));
}
double gelu_grad_ref(double x) {
  const double k = std::sqrt(2.0 / kPi), u = k * (x + 0.044715 * x * x * x), th = std::tanh(u);
  return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * k * (1.0 + 3.0 * 0.044715 * x * x);
}
double gelu_erf(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double gelu_erf_grad(double x) {
  return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * kPi);
}

// ---- device buffers -------------------------------------------------------------------------
struct Buf {
  void* p = nullptr;
  size_t bytes = 0;
  explicit Buf(size_t b) : bytes(std::max<size_t>(b, 1)) {
    if (cudaMalloc(&p, bytes) != cudaSuccess) throw std::runtime_error("cudaMalloc failed");
  }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  ~Buf() { cudaFree(p); }
  template <typename T>
  T* as(size_t offset_elems = 0) const {
    return reinterpret_cast<T*>(p) + offset_elems;
  }
};

void put(void* dst, const std::vector<float>& v, bool bf16) {
  if (bf16) {
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); i++) h[i] = f2bf(v[i]);
    ASSERT_EQ(cudaMemcpy(dst, h.data(), h.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  } else {
    ASSERT_EQ(cudaMemcpy(dst, v.data(), v.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  }
}

// Rows `rows` (cols [0, ncols)) of a row-major device matrix with leading dimension ld.
std::vector<float> get_rows(const void* base, bool bf16, long long ld, int ncols, const std::vector<int>& rows) {
  std::vector<float> out(rows.size() * size_t(ncols));
  const size_t es = bf16 ? 2 : 4;
  std::vector<uint16_t> h(ncols);
  for (size_t i = 0; i < rows.size(); i++) {
    const char* src = static_cast<const char*>(base) + size_t(rows[i]) * size_t(ld) * es;
    if (bf16) {
      EXPECT_EQ(cudaMemcpy(h.data(), src, size_t(ncols) * 2, cudaMemcpyDeviceToHost), cudaSuccess);
      for (int c = 0; c < ncols; c++) out[i * ncols + c] = bf2f(h[c]);
    } else {
      EXPECT_EQ(cudaMemcpy(out.data() + i * ncols, src, size_t(ncols) * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    }
  }
  return out;
}

std::vector<int> all_rows(int M) {
  std::vector<int> r(M);
  for (int i = 0; i < M; i++) r[i] = i;
  return r;
}
// Every row of a small output; 48 fixed rows (first, last, spread) of a large one.
std::vector<int> sample_rows(int M, uint64_t seed) {
  if (M <= 256) return all_rows(M);
  std::vector<int> r{0, M - 1};
  Rand g(seed);
  while (r.size() < 48) r.push_back(int(g.next() % uint64_t(M)));
  std::sort(r.begin(), r.end());
  r.erase(std::unique(r.begin(), r.end()), r.end());
  return r;
}

// rows of op(A)[M,K] op(B)[K,N] in double; A, B are the stored host matrices.
std::vector<double> ref_gemm(const std::vector<float>& A, long long lda, bool ta, const std::vector<float>& B,
                             long long ldb, bool tb, int N, int K, const std::vector<int>& rows) {
  std::vector<double> out(rows.size() * size_t(N), 0.0), arow(K);
  for (size_t i = 0; i < rows.size(); i++) {
    const long long r = rows[i];
    for (int k = 0; k < K; k++) arow[k] = ta ? A[size_t(k * lda + r)] : A[size_t(r * lda + k)];
    double* o = out.data() + i * N;
    if (!tb) {
      for (int k = 0; k < K; k++) {
        const double a = arow[k];
        if (a == 0.0) continue;
        const float* b = B.data() + size_t(k) * ldb;
        for (int c = 0; c < N; c++) o[c] += a * b[c];
      }
    } else {
      for (int c = 0; c < N; c++) {
        const float* b = B.data() + size_t(c) * ldb;
        double acc = 0.0;
        for (int k = 0; k < K; k++) acc += arow[k] * b[k];
        o[c] = acc;
      }
    }
  }
  return out;
}

double rel_err(const std::vector<float>& got, const std::vector<double>& ref, size_t* nonfinite) {
  double num = 0, den = 0;
  *nonfinite = 0;
  for (size_t i = 0; i < ref.size(); i++) {
    if (!std::isfinite(got[i])) ++*nonfinite;
    const double d = double(got[i]) - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

void expect_rel(const std::vector<float>& got, const std::vector<double>& ref, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  size_t nonfinite = 0;
  const double e = rel_err(got, ref, &nonfinite);
  EXPECT_EQ(nonfinite, 0u) << what << ": non-finite outputs";
  EXPECT_LE(e, tol) << what << ": relative Frobenius error " << e << " > " << tol;
}

void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << what << ": bits differ";
}

const char* epi_name(LtEpilogue e) {
  switch (e) {
    case LtEpilogue::Default: return "Default";
    case LtEpilogue::Bias: return "Bias";
    case LtEpilogue::GeluAuxBias: return "GeluAuxBias";
    case LtEpilogue::DGelu: return "DGelu";
  }
  return "?";
}

class GemmLt : public ::testing::Test {
 protected:
  void SetUp() override {
    BATON_GPU_TEST_OR_SKIP();
    ASSERT_EQ(cudaStreamCreate(&s_), cudaSuccess);
    lt_ = std::make_unique<LtGemm>(s_);
  }
  void TearDown() override {
    lt_.reset();
    if (s_ != nullptr) cudaStreamDestroy(s_);
  }
  void sync() { ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess); }
  cudaStream_t s_ = nullptr;
  std::unique_ptr<LtGemm> lt_;
};

// ---- LtGemm: every mode ----------------------------------------------------------------------
struct Case {
  int M, N, K;
  bool ta, tb;
  int pad;      // added to every leading dimension
  bool offset;  // A, B, D, aux one element past an allocation (alignment 2 or 4 bytes)
};

const std::vector<Case>& lt_cases() {
  static const std::vector<Case> c{
      {1, 8, 8, false, false, 0, false},    {7, 16, 24, false, true, 0, false},
      {64, 64, 64, false, false, 0, false}, {64, 64, 64, false, true, 0, false},
      {64, 64, 64, true, false, 0, false},  {64, 64, 64, true, true, 0, false},
      {33, 40, 17, true, true, 3, false},   {65, 35, 51, false, true, 0, false},
      {37, 100, 96, false, true, 0, true},  {130, 72, 257, true, false, 5, true},
      {129, 256, 128, false, false, 0, false}};
  return c;
}

// One LtGemm call of case c against the double reference.
void run_lt_case(LtGemm& lt, cudaStream_t s, const Case& c, cudaDataType_t abt, cudaDataType_t cdt,
                 LtEpilogue epi, bool fused, int variant) {
  const bool abf = abt == CUDA_R_16BF, cbf = cdt == CUDA_R_16BF;
  const std::string what = std::string(epi_name(epi)) + (abf ? " bf16" : " f32") + (cbf ? "->bf16" : "->f32") +
                           (fused ? " fused" : " fallback") + " M=" + std::to_string(c.M) + " N=" +
                           std::to_string(c.N) + " K=" + std::to_string(c.K) + " ta=" + std::to_string(c.ta) +
                           " tb=" + std::to_string(c.tb) + " pad=" + std::to_string(c.pad) +
                           " offset=" + std::to_string(c.offset) + " variant=" + std::to_string(variant);
  SCOPED_TRACE(what);
  const int arows = c.ta ? c.K : c.M, acols = c.ta ? c.M : c.K;
  const int brows = c.tb ? c.N : c.K, bcols = c.tb ? c.K : c.N;
  const int lda = acols + c.pad, ldb = bcols + c.pad, ldd = c.N + c.pad, ldaux = c.N + c.pad;
  const double scale = std::sqrt(4.5 / std::sqrt(double(c.K)));  // products ~ 1.5 in size: GELU's bend
  const auto A = rnd(size_t(arows) * lda, 11 + variant, scale, abf);
  const auto B = rnd(size_t(brows) * ldb, 12 + variant, scale, abf);
  const auto D0 = rnd(size_t(c.M) * ldd, 13 + variant, 1.0, cbf);
  const auto bias = rnd(size_t(c.N), 14 + variant, 1.0, cbf);
  const auto aux0 = rnd(size_t(c.M) * ldaux, 15 + variant, 3.0, cbf);  // DGELU's pre-activations
  const size_t ea = abf ? 2 : 4, ec = cbf ? 2 : 4, off = c.offset ? 1 : 0;
  Buf dA((A.size() + 1) * ea), dB((B.size() + 1) * ea), dD((D0.size() + 1) * ec), dbias(bias.size() * ec),
      daux((aux0.size() + 1) * ec);
  void* pA = static_cast<char*>(dA.p) + off * ea;
  void* pB = static_cast<char*>(dB.p) + off * ea;
  void* pD = static_cast<char*>(dD.p) + off * ec;
  void* paux = static_cast<char*>(daux.p) + off * ec;
  put(pA, A, abf);
  put(pB, B, abf);
  put(pD, D0, cbf);
  put(dbias.p, bias, cbf);
  put(paux, aux0, cbf);

  LtMatmulArgs a;
  a.trans_a = c.ta;
  a.trans_b = c.tb;
  a.M = c.M;
  a.N = c.N;
  a.K = c.K;
  a.ab_type = abt;
  a.cd_type = cdt;
  a.A = pA;
  a.lda = lda;
  a.B = pB;
  a.ldb = ldb;
  a.D = pD;
  a.ldd = ldd;
  a.epilogue = epi;
  const bool gelu_bias = variant % 2 == 0;
  if (epi == LtEpilogue::Default || epi == LtEpilogue::Bias) {
    a.alpha = variant % 2 ? 0.5f : 1.0f;
    a.beta = variant % 2 ? 1.0f : 0.0f;
  } else {
    a.alpha = variant % 2 ? 0.5f : 1.0f;
  }
  if (epi == LtEpilogue::Bias || (epi == LtEpilogue::GeluAuxBias && gelu_bias)) a.bias = dbias.p;
  if (epi == LtEpilogue::GeluAuxBias || epi == LtEpilogue::DGelu) {
    a.aux = paux;
    a.ldaux = ldaux;
  }
  lt.set_fused_epilogues(fused);
  lt.matmul(a);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  if (!fused && epi != LtEpilogue::Default) {
    EXPECT_FALSE(lt.last_fused());
  }
  // Documented: aux ld must be a multiple of 8 for the fused GELU epilogues.
  if ((epi == LtEpilogue::GeluAuxBias || epi == LtEpilogue::DGelu) && ldaux % 8 != 0) {
    EXPECT_FALSE(lt.last_fused());
  }
  const bool ran_fused = lt.last_fused() && epi != LtEpilogue::Default;

  const auto rows = all_rows(c.M);
  auto ref = ref_gemm(A, lda, c.ta, B, ldb, c.tb, c.N, c.K, rows);
  for (auto& v : ref) v *= a.alpha;
  const auto got = get_rows(pD, cbf, ldd, c.N, rows);
  const double once = cbf ? kBf16Once : f32_tol(c.K);
  const double twice = cbf ? kBf16Twice : f32_tol(c.K);
  switch (epi) {
    case LtEpilogue::Default:
    case LtEpilogue::Bias:
      for (int r = 0; r < c.M; r++)
        for (int j = 0; j < c.N; j++) {
          double& v = ref[size_t(r) * c.N + j];
          v += a.beta * D0[size_t(r) * ldd + j];
          if (epi == LtEpilogue::Bias) v += bias[j];
        }
      expect_rel(got, ref, epi == LtEpilogue::Default ? once : twice, what + " D");
      break;
    case LtEpilogue::GeluAuxBias: {
      std::vector<double> gref(ref.size());
      for (int r = 0; r < c.M; r++)
        for (int j = 0; j < c.N; j++) {
          double& v = ref[size_t(r) * c.N + j];
          if (gelu_bias) v += bias[j];
          gref[size_t(r) * c.N + j] = gelu_ref(v);
        }
      expect_rel(get_rows(paux, cbf, ldaux, c.N, rows), ref, twice, what + " aux (pre-activation)");
      expect_rel(got, gref, cbf ? kBf16Twice : (ran_fused ? kLtGelu : f32_tol(c.K)), what + " D = gelu(aux)");
      break;
    }
    case LtEpilogue::DGelu:
      for (int r = 0; r < c.M; r++)
        for (int j = 0; j < c.N; j++) ref[size_t(r) * c.N + j] *= gelu_grad_ref(aux0[size_t(r) * ldaux + j]);
      expect_rel(got, ref, cbf ? kBf16Twice : (ran_fused ? kLtGelu : f32_tol(c.K)), what + " D = gelu'(aux) AB");
      break;
  }
}

void run_all_modes(LtGemm& lt, cudaStream_t s, cudaDataType_t abt, cudaDataType_t cdt) {
  size_t fused_calls = 0, calls = 0;
  for (LtEpilogue epi : {LtEpilogue::Default, LtEpilogue::Bias, LtEpilogue::GeluAuxBias, LtEpilogue::DGelu})
    for (bool fused : {true, false}) {
      if (epi == LtEpilogue::Default && !fused) continue;
      int variant = 0;
      for (const Case& c : lt_cases()) {
        run_lt_case(lt, s, c, abt, cdt, epi, fused, variant++);
        if (epi != LtEpilogue::Default && fused) {
          ++calls;
          fused_calls += lt.last_fused();
        }
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  std::printf("[info] %s->%s: %zu of %zu epilogue calls ran fused in cuBLASLt\n", abt == CUDA_R_16BF ? "bf16" : "f32",
              cdt == CUDA_R_16BF ? "bf16" : "f32", fused_calls, calls);
}

TEST_F(GemmLt, ModesBf16ToBf16) { run_all_modes(*lt_, s_, CUDA_R_16BF, CUDA_R_16BF); }
TEST_F(GemmLt, ModesBf16ToF32) { run_all_modes(*lt_, s_, CUDA_R_16BF, CUDA_R_32F); }
TEST_F(GemmLt, ModesF32ToF32) { run_all_modes(*lt_, s_, CUDA_R_32F, CUDA_R_32F); }

// cuBLASLt's GELU epilogue is assumed to be the tanh form (cublasLt.h only says "GELU"; PyTorch's
// addmm fallback for the same epilogue applies gelu(approximate="tanh")). D = gelu(x) with x on a
// grid over [-5, 5] (K = 8: A has x in column 0, B ones in row 0). The erf form differs from the
// tanh form by up to 4.7e-4 (at |x| ~ 2.7): an fp32 tanh-form result is within ~1e-6 of it.
TEST_F(GemmLt, GeluEpilogueForm) {
  const int M = 1024, N = 16, K = 8;
  bool checked = false;
  for (cudaDataType_t abt : {CUDA_R_16BF, CUDA_R_32F}) {
    const bool abf = abt == CUDA_R_16BF;
    std::vector<float> A(size_t(M) * K, 0.0f), B(size_t(K) * N, 0.0f), ones(size_t(M) * K, 0.0f);
    std::vector<float> x(M);
    for (int i = 0; i < M; i++) {
      x[i] = float(-5.0 + 10.0 * i / (M - 1));
      if (abf) x[i] = bf2f(f2bf(x[i]));
      A[size_t(i) * K] = x[i];
      ones[size_t(i) * K] = 1.0f;
    }
    for (int j = 0; j < N; j++) B[j] = 1.0f;
    Buf dA(A.size() * 4), dOnes(ones.size() * 4), dB(B.size() * 4), dbias(N * 4), dD(size_t(M) * N * 4),
        daux(size_t(M) * N * 4);
    put(dA.p, A, abf);
    put(dOnes.p, ones, abf);
    put(dB.p, B, abf);
    put(dbias.p, std::vector<float>(N, 0.0f), false);
    for (LtEpilogue epi : {LtEpilogue::GeluAuxBias, LtEpilogue::DGelu}) {
      LtMatmulArgs a;
      a.M = M;
      a.N = N;
      a.K = K;
      a.ab_type = abt;
      a.cd_type = CUDA_R_32F;
      a.A = epi == LtEpilogue::GeluAuxBias ? dA.p : dOnes.p;  // DGELU: the product is 1
      a.lda = K;
      a.B = dB.p;
      a.ldb = N;
      a.D = dD.p;
      a.ldd = N;
      a.epilogue = epi;
      a.aux = daux.p;
      a.ldaux = N;
      if (epi == LtEpilogue::GeluAuxBias) {
        a.bias = dbias.p;
      } else {
        std::vector<float> pre(size_t(M) * N);
        for (int i = 0; i < M; i++)
          for (int j = 0; j < N; j++) pre[size_t(i) * N + j] = x[i];
        put(daux.p, pre, false);
      }
      lt_->set_fused_epilogues(true);
      lt_->matmul(a);
      sync();
      const std::string what = std::string(epi_name(epi)) + (abf ? " bf16->f32" : " f32->f32");
      if (!lt_->last_fused()) {
        std::printf("[info] %s: cuBLASLt offered no fused algorithm; form not checked\n", what.c_str());
        continue;
      }
      checked = true;
      const auto got = get_rows(dD.p, false, N, N, all_rows(M));
      double d_tanh = 0, d_erf = 0;
      for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
          const double g = got[size_t(i) * N + j];
          const double t = epi == LtEpilogue::GeluAuxBias ? gelu_ref(x[i]) : gelu_grad_ref(x[i]);
          const double e = epi == LtEpilogue::GeluAuxBias ? gelu_erf(x[i]) : gelu_erf_grad(x[i]);
          d_tanh = std::max(d_tanh, std::fabs(g - t));
          d_erf = std::max(d_erf, std::fabs(g - e));
          if (!std::isfinite(g)) d_tanh = INFINITY;
        }
      std::printf("[info] %s: max |cuBLASLt - tanh form| = %.3g, max |cuBLASLt - erf form| = %.3g\n", what.c_str(),
                  d_tanh, d_erf);
      // Closer to the tanh form than to the erf form (else the fused and fallback paths disagree
      // systematically); within 5e-5 of it unless cuBLASLt uses a fast tanh (reported above).
      EXPECT_LT(d_tanh, d_erf) << what << ": cuBLASLt's GELU is not the tanh form";
      if (d_tanh > 5e-5)
        std::printf("[info] %s: deviates from the fp32 tanh form by more than 5e-5 (fast tanh?)\n", what.c_str());
    }
  }
  if (!checked) std::printf("[info] no fused GELU epilogue was available: its form was not checked\n");
}

// ---- the dense layer ------------------------------------------------------------------------
struct Shape {
  int N, C, OC;
};
std::string shape_name(const Shape& s) {
  return "N=" + std::to_string(s.N) + " C=" + std::to_string(s.C) + " OC=" + std::to_string(s.OC);
}
const std::vector<Shape>& small_shapes() {
  static const std::vector<Shape> v{{1, 8, 8}, {7, 16, 24}, {37, 40, 100}, {65, 35, 51}, {257, 64, 192}};
  return v;
}
const std::vector<Shape>& gpt2_shapes() {  // qkv, fc, attn proj, fc_proj, LM head
  static const std::vector<Shape> v{{8192, 768, 2304}, {8192, 768, 3072}, {8192, 768, 768}, {8192, 3072, 768},
                                    {8192, 768, 50304}};
  return v;
}

struct DenseData {
  Shape sh;
  std::vector<float> inp, weight, bias;  // bf16 values
  Buf d_inp, d_weight, d_bias;
  explicit DenseData(Shape s)
      : sh(s),
        inp(rnd(size_t(s.N) * s.C, 21, std::sqrt(4.5 / std::sqrt(double(s.C))), true)),
        weight(rnd(size_t(s.OC) * s.C, 22, std::sqrt(4.5 / std::sqrt(double(s.C))), true)),
        bias(rnd(size_t(s.OC), 23, 0.5, true)),
        d_inp(inp.size() * 2),
        d_weight(weight.size() * 2),
        d_bias(bias.size() * 2) {
    put(d_inp.p, inp, true);
    put(d_weight.p, weight, true);
    put(d_bias.p, bias, true);
  }
};

void check_forward(LtGemm& lt, cudaStream_t s, const Shape& sh, bool full_combos) {
  DenseData d(sh);
  const auto rows = sample_rows(sh.N, 31);
  const auto prod = ref_gemm(d.inp, sh.C, false, d.weight, sh.C, true, sh.OC, sh.C, rows);
  Buf out(size_t(sh.N) * sh.OC * 2), gout(size_t(sh.N) * sh.OC * 2);
  for (bool with_bias : {false, true})
    for (bool with_gelu : {false, true})
      for (bool fused : {true, false}) {
        // GPT-2 shapes other than fc: as the model calls them (bias except on the LM head, no GELU).
        if (!full_combos && (with_bias != (sh.OC != 50304) || with_gelu)) continue;
        if (!with_gelu && !with_bias && !fused) continue;  // no epilogue: nothing to fuse
        const std::string what = shape_name(sh) + (with_bias ? " bias" : "") + (with_gelu ? " gelu" : "") +
                                 (fused ? " fused" : " unfused");
        SCOPED_TRACE(what);
        lt.set_fused_epilogues(fused);
        matmul_forward_bf16(lt, out.as<__nv_bfloat16>(), d.d_inp.as<__nv_bfloat16>(), d.d_weight.as<__nv_bfloat16>(),
                            with_bias ? d.d_bias.as<__nv_bfloat16>() : nullptr, sh.N, sh.C, sh.OC,
                            with_gelu ? gout.as<__nv_bfloat16>() : nullptr, s);
        ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
        const bool ran_fused = lt.last_fused();
        if (!fused && (with_bias || with_gelu)) {
          EXPECT_FALSE(ran_fused);
        }
        if (with_gelu && sh.OC % 8 != 0) {  // aux ld = OC must be a multiple of 8
          EXPECT_FALSE(ran_fused);
        }
        if (fused && (with_bias || with_gelu) && sh.N >= 8192)
          std::printf("[info] %s: epilogue %s\n", what.c_str(), ran_fused ? "fused" : "NOT fused (fallback kernel)");
        std::vector<double> pre(prod), g(prod.size());
        for (size_t i = 0; i < rows.size(); i++)
          for (int j = 0; j < sh.OC; j++) {
            double& v = pre[i * sh.OC + j];
            if (with_bias) v += d.bias[j];
            g[i * sh.OC + j] = gelu_ref(v);
          }
        const double tol = (with_bias || with_gelu) ? kBf16Twice : kBf16Once;
        expect_rel(get_rows(out.p, true, sh.OC, sh.OC, rows), pre, tol, what + " out");
        if (with_gelu) expect_rel(get_rows(gout.p, true, sh.OC, sh.OC, rows), g, kBf16Twice, what + " gelu_out");
      }
}

TEST_F(GemmLt, DenseForwardSmall) {
  for (const Shape& sh : small_shapes()) {
    check_forward(*lt_, s_, sh, true);
    if (HasFatalFailure()) return;
  }
}
TEST_F(GemmLt, DenseForwardGpt2) {
  for (const Shape& sh : gpt2_shapes()) {
    check_forward(*lt_, s_, sh, sh.OC == 3072);  // every combination on the fc layer
    if (HasFatalFailure()) return;
  }
}

void check_backward(LtGemm& lt, cudaStream_t s, const Shape& sh) {
  DenseData d(sh);
  const auto dout = rnd(size_t(sh.N) * sh.OC, 41, 1.0, true);
  const auto pre = rnd(size_t(sh.N) * sh.C, 42, 3.0, true);  // GELU inputs of the previous layer
  const auto dinp0 = rnd(size_t(sh.N) * sh.C, 43, 1.0, true);
  const auto dw0 = rnd(size_t(sh.OC) * sh.C, 44, 1.0, false);
  const auto db0 = rnd(size_t(sh.OC), 45, 1.0, false);
  Buf d_dout(dout.size() * 2), d_pre(pre.size() * 2), d_dinp(dinp0.size() * 2), d_dw(dw0.size() * 4),
      d_db(db0.size() * 4);
  const size_t nscratch = matmul_backward_bf16_scratch_floats(sh.N, sh.OC);
  Buf scratch(nscratch * 4);
  put(d_dout.p, dout, true);
  put(d_pre.p, pre, true);

  // References: dinp rows (product, before accumulation / GELU), dweight rows, all of dbias.
  const auto rows = sample_rows(sh.N, 51), wrows = sample_rows(sh.OC, 52);
  const auto dprod = ref_gemm(dout, sh.OC, false, d.weight, sh.C, false, sh.C, sh.OC, rows);
  const auto dwprod = ref_gemm(dout, sh.OC, true, d.inp, sh.C, false, sh.C, sh.N, wrows);
  std::vector<double> dbref(sh.OC);
  for (int j = 0; j < sh.OC; j++) dbref[j] = db0[j];
  for (int n = 0; n < sh.N; n++)
    for (int j = 0; j < sh.OC; j++) dbref[j] += dout[size_t(n) * sh.OC + j];
  std::vector<double> dwref(dwprod);
  for (size_t i = 0; i < wrows.size(); i++)
    for (int c = 0; c < sh.C; c++) dwref[i * sh.C + c] += dw0[size_t(wrows[i]) * sh.C + c];

  for (bool acc : {false, true})
    for (int g = 0; g < (acc ? 1 : 2); g++)
      for (bool fused : {true, false}) {
        if (!g && !fused) continue;  // no epilogue
        std::vector<float> full_dinp, full_dw, full_db;
        for (int mask = 7; mask >= 0; mask--) {
          const bool want_dinp = mask & 1, want_dw = mask & 2, want_db = mask & 4;
          const std::string what = shape_name(sh) + (acc ? " accumulate" : "") + (g ? " dgelu" : "") +
                                   (fused ? " fused" : " unfused") + " outputs=" + (want_dinp ? "dinp," : "") +
                                   (want_dw ? "dweight," : "") + (want_db ? "dbias" : "");
          SCOPED_TRACE(what);
          put(d_dinp.p, dinp0, true);
          put(d_dw.p, dw0, false);
          put(d_db.p, db0, false);
          lt.set_fused_epilogues(fused);
          matmul_backward_bf16(lt, want_dinp ? d_dinp.as<__nv_bfloat16>() : nullptr,
                               want_dw ? d_dw.as<float>() : nullptr, want_db ? d_db.as<float>() : nullptr,
                               d_dout.as<__nv_bfloat16>(), d.d_inp.as<__nv_bfloat16>(), d.d_weight.as<__nv_bfloat16>(),
                               sh.N, sh.C, sh.OC, acc, true, g ? d_pre.as<__nv_bfloat16>() : nullptr, scratch.as<float>(),
                               nscratch, s);
          ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
          if (want_dinp) {
            // last_fused() describes the last LtGemm call: the dinp GEMM only when no dweight GEMM
            // follows it (that one is a DEFAULT call, which always counts as fused).
            const bool dinp_last = !want_dw;
            if (g && !fused && dinp_last) {
              EXPECT_FALSE(lt.last_fused());
            }
            if (g && sh.C % 8 != 0 && dinp_last) {  // aux ld = C must be a multiple of 8
              EXPECT_FALSE(lt.last_fused());
            }
            if (g && fused && sh.N >= 8192 && dinp_last)
              std::printf("[info] %s: DGELU %s\n", what.c_str(), lt.last_fused() ? "fused" : "NOT fused (fallback)");
            const auto got = get_rows(d_dinp.p, true, sh.C, sh.C, rows);
            std::vector<double> ref(dprod);
            for (size_t i = 0; i < rows.size(); i++)
              for (int c = 0; c < sh.C; c++) {
                double& v = ref[i * sh.C + c];
                const size_t k = size_t(rows[i]) * sh.C + c;
                if (g) v *= gelu_grad_ref(pre[k]);
                if (acc) v += dinp0[k];
              }
            expect_rel(got, ref, g ? kBf16Twice : kBf16Once, what + " dinp");
            if (mask == 7) full_dinp = got;
            else expect_same_bits(got, full_dinp, what + " dinp vs the full call");
          }
          if (want_dw) {
            const auto got = get_rows(d_dw.p, false, sh.C, sh.C, wrows);
            expect_rel(got, dwref, f32_tol(sh.N), what + " dweight");
            if (mask == 7) full_dw = got;
            else expect_same_bits(got, full_dw, what + " dweight vs the full call");
          }
          if (want_db) {
            const auto got = get_rows(d_db.p, false, sh.OC, sh.OC, {0});
            expect_rel(got, dbref, f32_tol(sh.N), what + " dbias");
            if (mask == 7) full_db = got;
            else expect_same_bits(got, full_db, what + " dbias vs the full call");
          }
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
}

TEST_F(GemmLt, DenseBackwardSmall) {
  for (const Shape& sh : small_shapes()) {
    check_backward(*lt_, s_, sh);
    if (HasFatalFailure()) return;
  }
}
TEST_F(GemmLt, DenseBackwardGpt2) {
  for (const Shape& sh : gpt2_shapes()) {
    check_backward(*lt_, s_, sh);
    if (HasFatalFailure()) return;
  }
}

// ---- determinism, cache, preconditions ------------------------------------------------------
std::vector<float> get_all(const Buf& b, bool bf16, size_t n) { return get_rows(b.p, bf16, 0, int(n), {0}); }

TEST_F(GemmLt, Deterministic) {
  const Shape sh{8192, 768, 3072};
  DenseData d(sh);
  const auto dout = rnd(size_t(sh.N) * sh.OC, 61, 1.0, true);
  const auto pre = rnd(size_t(sh.N) * sh.C, 62, 3.0, true);  // dgelu_pre[N, C]
  const auto dw0 = rnd(size_t(sh.OC) * sh.C, 63, 1.0, false);
  Buf out(dout.size() * 2), gout(dout.size() * 2), d_dout(dout.size() * 2), d_pre(pre.size() * 2),
      dinp(size_t(sh.N) * sh.C * 2), dw(dw0.size() * 4), db(size_t(sh.OC) * 4);
  const size_t nscratch = matmul_backward_bf16_scratch_floats(sh.N, sh.OC);
  Buf scratch(nscratch * 4);
  put(d_dout.p, dout, true);
  put(d_pre.p, pre, true);
  LtGemm other(s_);  // a second instance (a restarted run) must agree too
  std::vector<float> first[5];
  for (int run = 0; run < 3; run++) {
    LtGemm& lt = run == 2 ? other : *lt_;
    matmul_forward_bf16(lt, out.as<__nv_bfloat16>(), d.d_inp.as<__nv_bfloat16>(), d.d_weight.as<__nv_bfloat16>(),
                        d.d_bias.as<__nv_bfloat16>(), sh.N, sh.C, sh.OC, gout.as<__nv_bfloat16>(), s_);
    put(dw.p, dw0, false);
    ASSERT_EQ(cudaMemset(db.p, 0, db.bytes), cudaSuccess);
    // Backward with DGELU (as if a GELU preceded this layer).
    matmul_backward_bf16(lt, dinp.as<__nv_bfloat16>(), dw.as<float>(), db.as<float>(), d_dout.as<__nv_bfloat16>(),
                         d.d_inp.as<__nv_bfloat16>(), d.d_weight.as<__nv_bfloat16>(), sh.N, sh.C, sh.OC, false, true,
                         d_pre.as<__nv_bfloat16>(), scratch.as<float>(), nscratch, s_);
    sync();
    std::vector<float> got[5] = {get_all(out, true, dout.size()), get_all(gout, true, dout.size()),
                                 get_all(dinp, true, size_t(sh.N) * sh.C), get_all(dw, false, dw0.size()),
                                 get_all(db, false, sh.OC)};
    const char* names[5] = {"out", "gelu_out", "dinp", "dweight", "dbias"};
    for (int i = 0; i < 5; i++) {
      if (run == 0) first[i] = std::move(got[i]);
      else expect_same_bits(got[i], first[i], std::string(names[i]) + (run == 2 ? " (second LtGemm)" : " (second call)"));
    }
  }
}

TEST_F(GemmLt, HeuristicCachedPerShape) {
  const Shape sh{64, 128, 96};
  DenseData d(sh), d2(sh);
  Buf out(size_t(sh.N) * sh.OC * 2), out2(size_t(sh.N) * sh.OC * 2);
  EXPECT_EQ(lt_->heuristic_queries(), 0u);
  matmul_forward_bf16(*lt_, out.as<__nv_bfloat16>(), d.d_inp.as<__nv_bfloat16>(), d.d_weight.as<__nv_bfloat16>(),
                      d.d_bias.as<__nv_bfloat16>(), sh.N, sh.C, sh.OC, nullptr, s_);
  const size_t q1 = lt_->heuristic_queries();
  EXPECT_GE(q1, 1u);
  EXPECT_LE(q1, 2u);  // the fused query, plus the DEFAULT one if BIAS had no algorithm
  EXPECT_EQ(lt_->cached_plans(), 1u);
  // Same shape, other (equally aligned: cudaMalloc'd) buffers: a cache hit.
  matmul_forward_bf16(*lt_, out2.as<__nv_bfloat16>(), d2.d_inp.as<__nv_bfloat16>(), d2.d_weight.as<__nv_bfloat16>(),
                      d2.d_bias.as<__nv_bfloat16>(), sh.N, sh.C, sh.OC, nullptr, s_);
  EXPECT_EQ(lt_->heuristic_queries(), q1);
  EXPECT_EQ(lt_->cached_plans(), 1u);
  // Another shape, another epilogue: new keys.
  matmul_forward_bf16(*lt_, out.as<__nv_bfloat16>(), d.d_inp.as<__nv_bfloat16>(), d.d_weight.as<__nv_bfloat16>(),
                      d.d_bias.as<__nv_bfloat16>(), sh.N - 1, sh.C, sh.OC, nullptr, s_);
  EXPECT_GT(lt_->heuristic_queries(), q1);
  const size_t q2 = lt_->heuristic_queries();
  matmul_forward_bf16(*lt_, out.as<__nv_bfloat16>(), d.d_inp.as<__nv_bfloat16>(), d.d_weight.as<__nv_bfloat16>(),
                      nullptr, sh.N, sh.C, sh.OC, nullptr, s_);
  EXPECT_GT(lt_->heuristic_queries(), q2);
  EXPECT_EQ(lt_->cached_plans(), 3u);
  sync();
}

TEST_F(GemmLt, Preconditions) {
  Buf a(4096), b(4096), c(4096), aux(4096);
  LtMatmulArgs ok;
  ok.M = ok.N = ok.K = 8;
  ok.A = a.p;
  ok.B = b.p;
  ok.D = c.p;
  ok.lda = ok.ldb = ok.ldd = 8;
  EXPECT_NO_THROW(lt_->matmul(ok));
  auto bad = [&](auto edit) {
    LtMatmulArgs x = ok;
    edit(x);
    EXPECT_THROW(lt_->matmul(x), std::invalid_argument);
  };
  bad([](LtMatmulArgs& x) { x.lda = 7; });
  bad([](LtMatmulArgs& x) { x.ldd = 7; });
  bad([](LtMatmulArgs& x) {
    x.trans_b = true;
    x.N = 16;
    x.ldb = 7;
    x.ldd = 16;
  });
  bad([](LtMatmulArgs& x) { x.ab_type = CUDA_R_32F; });  // fp32 inputs need fp32 output
  bad([](LtMatmulArgs& x) { x.cd_type = CUDA_R_16F; });
  bad([](LtMatmulArgs& x) { x.epilogue = LtEpilogue::Bias; });  // no bias
  bad([&](LtMatmulArgs& x) {  // GELU epilogues take no beta
    x.epilogue = LtEpilogue::GeluAuxBias;
    x.aux = aux.p;
    x.ldaux = 8;
    x.beta = 1.0f;
  });
  bad([&](LtMatmulArgs& x) {  // aux ld < N
    x.epilogue = LtEpilogue::DGelu;
    x.aux = aux.p;
    x.ldaux = 4;
  });
  bad([&](LtMatmulArgs& x) {  // aux is D
    x.epilogue = LtEpilogue::DGelu;
    x.aux = x.D;
    x.ldaux = 8;
  });
  bad([&](LtMatmulArgs& x) { x.A = static_cast<char*>(a.p) + 1; });  // not element-aligned
  cudaStream_t other = nullptr;
  ASSERT_EQ(cudaStreamCreate(&other), cudaSuccess);
  auto* p = a.as<__nv_bfloat16>();
  EXPECT_THROW(matmul_forward_bf16(*lt_, p, p, p, nullptr, 8, 8, 8, nullptr, other), std::invalid_argument);
  float* f = c.as<float>();
  EXPECT_THROW(matmul_backward_bf16(*lt_, b.as<__nv_bfloat16>(), nullptr, nullptr, p, p, p, 8, 8, 8, true, true, p, f, 64, s_),
               std::invalid_argument);  // accumulate_dinp with dgelu
  EXPECT_THROW(matmul_backward_bf16(*lt_, nullptr, nullptr, f, p, p, p, 8, 8, 8, false, true, nullptr, f, 0, s_),
               std::invalid_argument);  // scratch too small
  sync();
  cudaStreamDestroy(other);
}

}  // namespace
}  // namespace baton::kernels
