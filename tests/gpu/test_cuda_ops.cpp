// CUDA backend (fp32) against the CPU reference backend: every Backend op on random inputs of
// several shapes (odd sizes included), a tiny GPT's loss and every gradient, determinism (same
// inputs twice -> identical bits) and the arena's "no cudaMalloc after warm-up". Label `gpu`;
// every test skips with "skipped: no CUDA device" where cudaGetDeviceCount reports none.
//
// Tolerances (|gpu - cpu| <= rtol * |cpu| + atol * max|cpu| over the tensor), and why:
//   exact        0, 0        zero/copy/scale/add/residual, embedding forward, AdamW moments: one
//                            IEEE op per element on both sides (or a copy).
//   sumsq        1e-12, 0    double accumulation in a different order (fp32 inputs exact in double).
//   gelu         1e-5, 1e-7  CUDA tanhf vs glibc tanhf (<= 2 ulp each) and FMA contraction.
//   reduce       1e-5, 1e-6  single-precision sums of <= a few thousand terms in a different order
//                            (layernorm statistics, bias/column sums, softmax sums, embedding dwpe).
//   gemm         1e-4, 1e-5  cuBLAS vs OpenBLAS sgemm: different blocking of the K sum (error
//                            ~ sqrt(K) eps relative to the row norm, K <= 1000 here); TF32 is off,
//                            with TF32 these would fail at ~1e-3.
//   attention    1e-4, 1e-5  GEMM order plus softmax sums (att, out, dqkv).
//   adamw param  1e-6, 1e-7  IEEE sqrt/div on both sides; FMA contraction may differ by an ulp.
//   model        2e-3, 1e-4  a 2-layer GPT: the above compounded through ~20 ops, forward and back
//                            (loss to 1e-5 relative).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#if defined(BATON_CUDA_HOST_MEMORY) && defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>  // __sanitizer_set_report_path
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "../support/gpu_test.h"
#include "backend/op_timed_backend.h"
#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "core/error.h"
#include "core/rng.h"
#include "model/gpt.h"
#include "optim/adamw.h"

// The CUDA emulator's count of launches (tests/emu/cuda_emu_runtime.cpp: the launchers' one
// cudaGetLastError per launch); null against the real cudart (weak), where the counts are not checked.
extern "C" long long cuda_emu_launch_checks(void) __attribute__((weak));

namespace baton {
namespace {

// Kernel launches `f` makes on the emulator; -1 on a real device.
template <class F>
long long emu_launches(F&& f) {
  if (cuda_emu_launch_checks == nullptr) {
    f();
    return -1;
  }
  const long long before = cuda_emu_launch_checks();
  f();
  return cuda_emu_launch_checks() - before;
}

struct Tol {
  double rtol, atol;
};
// kGelu: the kernel's tanh form and the CPU's x sigma(2u) form (src/backend/cpu/cpu_math.h) are
// each within ~4e-7 of the exact gradient near |x| ~ 2-4; measured apart by up to 2.7e-7 of max|cpu|.
constexpr Tol kExact{0, 0}, kSumsq{1e-12, 0}, kGelu{1e-5, 6e-7}, kReduce{1e-5, 1e-6},
    kGemm{1e-4, 1e-5}, kAttention{1e-4, 1e-5}, kAdamParam{1e-6, 1e-7}, kModel{2e-3, 1e-4};

std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.0f) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = scale * rng.normal();
  return v;
}

void expect_close(const std::vector<float>& gpu, const std::vector<float>& cpu, Tol tol,
                  const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  double maxabs = 0;
  for (float x : cpu)
    if (std::isfinite(x)) maxabs = std::max(maxabs, double(std::fabs(x)));
  size_t bad = 0, first = 0;
  double worst = 0;
  for (size_t i = 0; i < cpu.size(); i++) {
    if (gpu[i] == cpu[i]) continue;  // also equal infinities (row max over no columns)
    const double d = std::fabs(double(gpu[i]) - double(cpu[i]));
    const double lim = tol.rtol * std::fabs(double(cpu[i])) + tol.atol * maxabs;
    if (!(d <= lim)) {  // catches NaN
      if (bad++ == 0) first = i;
      worst = std::max(worst, d);
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << cpu.size() << " elements out of tolerance"
                     << " (first at " << first << ": gpu " << (bad ? gpu[first] : 0) << " cpu "
                     << (bad ? cpu[first] : 0) << ", worst diff " << worst << ", max|cpu| " << maxabs
                     << ")";
}

// A tensor living on both backends, with the same contents.
struct Pair {
  Backend* cpu;
  Backend* gpu;
  size_t n;
  float* c = nullptr;
  float* g = nullptr;
  Pair(Backend& cb, Backend& gb, size_t n_, const std::vector<float>* init = nullptr)
      : cpu(&cb), gpu(&gb), n(n_) {
    c = static_cast<float*>(cpu->alloc(std::max<size_t>(n, 1) * sizeof(float)));
    g = static_cast<float*>(gpu->alloc(std::max<size_t>(n, 1) * sizeof(float)));
    if (init != nullptr) set(*init);
  }
  Pair(const Pair&) = delete;
  ~Pair() {
    cpu->release(c);
    gpu->release(g);
  }
  void set(const std::vector<float>& v) {
    std::copy(v.begin(), v.end(), c);
    gpu->to_device(g, v.data(), v.size() * sizeof(float));
  }
  std::vector<float> host_gpu() const {
    std::vector<float> v(n);
    gpu->to_host(v.data(), g, n * sizeof(float));
    return v;
  }
  std::vector<float> host_cpu() const { return std::vector<float>(c, c + n); }
  void expect(Tol tol, const std::string& what) const { expect_close(host_gpu(), host_cpu(), tol, what); }
};

// Int tensors (tokens, targets) on both backends.
struct IntPair {
  Backend* cpu;
  Backend* gpu;
  int32_t* c;
  int32_t* g;
  IntPair(Backend& cb, Backend& gb, const std::vector<int32_t>& v) : cpu(&cb), gpu(&gb) {
    const size_t bytes = std::max<size_t>(v.size(), 1) * sizeof(int32_t);
    c = static_cast<int32_t*>(cpu->alloc(bytes));
    g = static_cast<int32_t*>(gpu->alloc(bytes));
    std::copy(v.begin(), v.end(), c);
    gpu->to_device(g, v.data(), v.size() * sizeof(int32_t));
  }
  IntPair(const IntPair&) = delete;
  ~IntPair() {
    cpu->release(c);
    gpu->release(g);
  }
};

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    BATON_GPU_TEST_OR_SKIP();
    cpu_ = make_cpu_backend();
    gpu_ = make_cuda_backend();
  }
  std::unique_ptr<Backend> cpu_, gpu_;
};

TEST_F(CudaOps, Elementwise) {
  for (size_t n : {size_t(1), size_t(1000), size_t(65537)}) {
    const std::string tag = " n=" + std::to_string(n);
    auto a = randn(n, 1), b = randn(n, 2);
    Pair x(*cpu_, *gpu_, n, &a), y(*cpu_, *gpu_, n, &b), out(*cpu_, *gpu_, n);
    cpu_->residual_forward(out.c, x.c, y.c, n);
    gpu_->residual_forward(out.g, x.g, y.g, n);
    out.expect(kExact, "residual" + tag);
    cpu_->add(x.c, y.c, n);
    gpu_->add(x.g, y.g, n);
    x.expect(kExact, "add" + tag);
    cpu_->scale(x.c, 0.37f, n);
    gpu_->scale(x.g, 0.37f, n);
    x.expect(kExact, "scale" + tag);
    cpu_->copy(out.c, x.c, n);
    gpu_->copy(out.g, x.g, n);
    out.expect(kExact, "copy" + tag);
    cpu_->zero(out.c, n);
    gpu_->zero(out.g, n);
    out.expect(kExact, "zero" + tag);
  }
}

TEST_F(CudaOps, AllocIsZeroed) {
  const size_t n = 12345;
  float* p = static_cast<float*>(gpu_->alloc(n * sizeof(float)));
  std::vector<float> h(n, 1.0f);
  gpu_->to_host(h.data(), p, n * sizeof(float));
  for (float x : h) ASSERT_EQ(x, 0.0f);
  gpu_->release(p);
}

// Under the CPU emulator built with AddressSanitizer (launch/sanitize.sh) the arena marks what it
// hands out: reading one float past a tensor — inside the arena's chunk, and inside the 256-byte
// rounding of its block — is reported (the negative control of cuda_backend.cpp's
// BATON_ARENA_POISON). Elsewhere (plain builds, a real GPU) there is nothing to check.
TEST_F(CudaOps, ArenaReportsAnAccessPastATensorUnderAsan) {
#if defined(BATON_CUDA_HOST_MEMORY) && defined(__SANITIZE_ADDRESS__)
  float* a = static_cast<float*>(gpu_->alloc(3 * sizeof(float)));
  float* b = static_cast<float*>(gpu_->alloc(64 * sizeof(float)));  // a's neighbour in the chunk
  std::vector<float> h(4);
  gpu_->to_host(h.data(), a, 3 * sizeof(float));  // in bounds: fine
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // The report goes to stderr for the death test to read, wherever launch/sanitize.sh sends others.
  EXPECT_DEATH((__sanitizer_set_report_path("stderr"), gpu_->to_host(h.data(), a, 4 * sizeof(float))),
               "use-after-poison");
  gpu_->release(a);
  gpu_->to_host(h.data(), b, 4 * sizeof(float));  // b is untouched by a's release
  EXPECT_DEATH((__sanitizer_set_report_path("stderr"), gpu_->to_host(h.data(), a, sizeof(float))),
               "use-after-poison");  // a released: its bytes are poisoned again
  gpu_->release(b);
#else
  GTEST_SKIP() << "not the CUDA emulator under AddressSanitizer (launch/sanitize.sh): nothing to check";
#endif
}

TEST_F(CudaOps, SumSquares) {
  for (size_t n : {size_t(0), size_t(1), size_t(12345), (size_t(1) << 20) + 3}) {
    auto a = randn(n, 3);
    Pair x(*cpu_, *gpu_, n, &a);
    const double c = cpu_->sum_squares(x.c, n), g = gpu_->sum_squares(x.g, n);
    EXPECT_NEAR(g, c, kSumsq.rtol * c) << "n=" << n;
    EXPECT_EQ(g, gpu_->sum_squares(x.g, n)) << "deterministic, n=" << n;
  }
}

// The gradient norm's form (issue 14 A7): many spans of one buffer in one call (one
// synchronisation) give exactly the per-span calls added in order, and the CPU's sum.
TEST_F(CudaOps, SumSquaresSpansEqualThePerSpanCalls) {
  const size_t n = 300001;
  auto a = randn(n, 9);
  Pair x(*cpu_, *gpu_, n, &a);
  const std::vector<std::pair<size_t, size_t>> spans = {{0, 1}, {16, 12345}, {20000, 0}, {20032, 200000},
                                                        {220032, 79969}};
  double per_span = 0, cpu = 0;
  for (const auto& [o, k] : spans) {
    per_span += gpu_->sum_squares(x.g + o, k);
    cpu += cpu_->sum_squares(x.c + o, k);
  }
  EXPECT_EQ(gpu_->sum_squares_spans(x.g, spans), per_span);
  EXPECT_NEAR(gpu_->sum_squares_spans(x.g, spans), cpu, kSumsq.rtol * cpu);
  EXPECT_EQ(gpu_->sum_squares_spans(x.g, {}), 0.0);
  // Two launches whatever the number of spans (the table is uploaded for a new list, then reused).
  double twice = 0;
  const long long k = emu_launches([&] { twice = gpu_->sum_squares_spans(x.g, spans); });
  if (k >= 0) EXPECT_EQ(k, 2);
  EXPECT_EQ(twice, per_span);
  // Another list after it (the cached table replaced): still the per-span sums.
  const std::vector<std::pair<size_t, size_t>> other = {{7, 70000}, {100000, 16384}, {0, 0}};
  double per_other = 0;
  for (const auto& [o, n2] : other) per_other += gpu_->sum_squares(x.g + o, n2);
  EXPECT_EQ(gpu_->sum_squares_spans(x.g, other), per_other);
  EXPECT_EQ(gpu_->sum_squares_spans(x.g, spans), per_span);
}

TEST_F(CudaOps, Gelu) {
  for (size_t n : {size_t(1), size_t(777), size_t(100003)}) {
    auto a = randn(n, 4, 2.0f), d = randn(n, 5);
    Pair x(*cpu_, *gpu_, n, &a), dy(*cpu_, *gpu_, n, &d), y(*cpu_, *gpu_, n), dx(*cpu_, *gpu_, n);
    cpu_->gelu_forward(y.c, x.c, n);
    gpu_->gelu_forward(y.g, x.g, n);
    y.expect(kGelu, "gelu_forward n=" + std::to_string(n));
    cpu_->gelu_backward(dx.c, x.c, dy.c, n);
    gpu_->gelu_backward(dx.g, x.g, dy.g, n);
    dx.expect(kGelu, "gelu_backward n=" + std::to_string(n));
  }
}

struct MmShape {
  int N, C, OC;
};
const MmShape kMmShapes[] = {{1, 1, 1}, {7, 13, 5}, {64, 96, 160}, {257, 33, 71}, {300, 512, 129}};

TEST_F(CudaOps, MatmulForward) {
  for (auto s : kMmShapes) {
    const std::string tag = " N=" + std::to_string(s.N) + " C=" + std::to_string(s.C) +
                            " OC=" + std::to_string(s.OC);
    auto xi = randn(size_t(s.N) * s.C, 6), wi = randn(size_t(s.OC) * s.C, 7, 0.1f),
         bi = randn(s.OC, 8);
    Pair x(*cpu_, *gpu_, xi.size(), &xi), w(*cpu_, *gpu_, wi.size(), &wi),
        b(*cpu_, *gpu_, bi.size(), &bi), out(*cpu_, *gpu_, size_t(s.N) * s.OC);
    for (bool bias : {true, false}) {
      cpu_->matmul_forward(out.c, x.c, w.c, bias ? b.c : nullptr, s.N, s.C, s.OC);
      gpu_->matmul_forward(out.g, x.g, w.g, bias ? b.g : nullptr, s.N, s.C, s.OC);
      out.expect(kGemm, std::string("matmul_forward bias=") + (bias ? "1" : "0") + tag);
    }
  }
}

// The op-time table on a GPU: OpTimedBackend over the CUDA backend times with events on the stream
// (EventClock), gives the same bits as the plain backend, and cuda_memory_stats still reaches the
// wrapped backend.
TEST_F(CudaOps, OpTimesWithEventsChangeNothing) {
  OpTimedBackend timed(make_cuda_backend());
  const int N = 33, C = 40, OC = 24;
  const std::vector<float> xi = randn(size_t(N) * C, 6), wi = randn(size_t(OC) * C, 7, 0.1f);
  std::vector<std::vector<float>> results;
  for (Backend* be : {static_cast<Backend*>(gpu_.get()), static_cast<Backend*>(&timed)}) {
    auto* x = static_cast<float*>(be->alloc(xi.size() * sizeof(float)));
    auto* w = static_cast<float*>(be->alloc(wi.size() * sizeof(float)));
    auto* out = static_cast<float*>(be->alloc(size_t(N) * OC * sizeof(float)));
    be->to_device(x, xi.data(), xi.size() * sizeof(float));
    be->to_device(w, wi.data(), wi.size() * sizeof(float));
    for (int rep = 0; rep < 3; ++rep) be->matmul_forward(out, x, w, nullptr, N, C, OC);
    results.emplace_back(size_t(N) * OC);
    be->to_host(results.back().data(), out, results.back().size() * sizeof(float));
    for (float* p : {x, w, out}) be->release(p);
  }
  EXPECT_EQ(results[0], results[1]);
  bool found = false;
  for (const OpTimedBackend::Row& r : timed.rows())
    if (r.op == "matmul_forward") {
      found = true;
      EXPECT_EQ(r.calls, 3);
      EXPECT_GE(r.ms, 0.0);
      EXPECT_EQ(r.flops, 3 * 2.0 * N * C * OC);
    }
  EXPECT_TRUE(found);
  EXPECT_GT(cuda_memory_stats(timed).peak_in_use_bytes, 0u);
  // baton bench's cuBLASLt line: bf16 only (fp32 GEMMs are plain cuBLAS), forwarded by the wrapper.
  EXPECT_TRUE(timed.kernel_summary().empty());
  OpTimedBackend bf16(make_cuda_backend(0, DType::BF16));
  EXPECT_EQ(bf16.kernel_summary().rfind("cuBLASLt: 0 heuristic queries, 0 cached plans, 0 GEMMs", 0), 0u)
      << bf16.kernel_summary();
}

TEST_F(CudaOps, MatmulBackwardEveryNullCombination) {
  std::vector<MmShape> shapes(std::begin(kMmShapes), std::end(kMmShapes));
  shapes.push_back({0, 8, 3});  // no rows: written parameter gradients are zeros, added ones unchanged
  for (auto s : shapes) {
    const std::string tag = " N=" + std::to_string(s.N) + " C=" + std::to_string(s.C) +
                            " OC=" + std::to_string(s.OC);
    auto xi = randn(size_t(s.N) * s.C, 9), wi = randn(size_t(s.OC) * s.C, 10, 0.1f),
         di = randn(size_t(s.N) * s.OC, 11), dxi = randn(size_t(s.N) * s.C, 12),
         dwi = randn(wi.size(), 13), dbi = randn(s.OC, 14);
    Pair x(*cpu_, *gpu_, xi.size(), &xi), w(*cpu_, *gpu_, wi.size(), &wi),
        dy(*cpu_, *gpu_, di.size(), &di);
    for (int mask = 0; mask < 8; mask++) {
      for (bool acc : {false, true}) {
        const std::string t = tag + " mask=" + std::to_string(mask) + " acc=" + std::to_string(acc);
        // Gradients start non-zero so accumulation (+=) and overwrite (=) are both checked.
        Pair dx(*cpu_, *gpu_, dxi.size(), &dxi), dw(*cpu_, *gpu_, dwi.size(), &dwi),
            db(*cpu_, *gpu_, dbi.size(), &dbi);
        const bool wdx = mask & 1, wdw = mask & 2, wdb = mask & 4;
        cpu_->matmul_backward(wdx ? dx.c : nullptr, wdw ? dw.c : nullptr, wdb ? db.c : nullptr, dy.c,
                              x.c, w.c, s.N, s.C, s.OC, acc, acc);
        gpu_->matmul_backward(wdx ? dx.g : nullptr, wdw ? dw.g : nullptr, wdb ? db.g : nullptr, dy.g,
                              x.g, w.g, s.N, s.C, s.OC, acc, acc);
        dx.expect(kGemm, "matmul_backward dinp" + t);
        dw.expect(kGemm, "matmul_backward dweight" + t);
        db.expect(kReduce, "matmul_backward dbias" + t);
      }
    }
  }
}

struct LnShape {
  int N, C;
};
const LnShape kLnShapes[] = {{1, 1}, {3, 7}, {64, 128}, {129, 769}, {1000, 64}};

TEST_F(CudaOps, LayernormForwardAndResidual) {
  for (auto s : kLnShapes) {
    const std::string tag = " N=" + std::to_string(s.N) + " C=" + std::to_string(s.C);
    const size_t nc = size_t(s.N) * s.C;
    auto ai = randn(nc, 15, 3.0f), bi = randn(nc, 16), wi = randn(s.C, 17), bbi = randn(s.C, 18);
    Pair a(*cpu_, *gpu_, nc, &ai), b(*cpu_, *gpu_, nc, &bi), w(*cpu_, *gpu_, s.C, &wi),
        bias(*cpu_, *gpu_, s.C, &bbi), out(*cpu_, *gpu_, nc), res(*cpu_, *gpu_, nc),
        mean(*cpu_, *gpu_, s.N), rstd(*cpu_, *gpu_, s.N);
    cpu_->layernorm_forward(out.c, mean.c, rstd.c, a.c, w.c, bias.c, s.N, s.C);
    gpu_->layernorm_forward(out.g, mean.g, rstd.g, a.g, w.g, bias.g, s.N, s.C);
    out.expect(kReduce, "layernorm_forward out" + tag);
    mean.expect(kReduce, "layernorm_forward mean" + tag);
    rstd.expect(kReduce, "layernorm_forward rstd" + tag);
    cpu_->residual_layernorm_forward(res.c, out.c, mean.c, rstd.c, a.c, b.c, w.c, bias.c, s.N, s.C);
    gpu_->residual_layernorm_forward(res.g, out.g, mean.g, rstd.g, a.g, b.g, w.g, bias.g, s.N, s.C);
    res.expect(kExact, "residual_layernorm_forward residual" + tag);
    out.expect(kReduce, "residual_layernorm_forward out" + tag);
    mean.expect(kReduce, "residual_layernorm_forward mean" + tag);
    rstd.expect(kReduce, "residual_layernorm_forward rstd" + tag);
  }
}

TEST_F(CudaOps, LayernormBackwardEveryNullCombination) {
  for (auto s : kLnShapes) {
    const std::string tag = " N=" + std::to_string(s.N) + " C=" + std::to_string(s.C);
    const size_t nc = size_t(s.N) * s.C;
    auto xi = randn(nc, 19, 2.0f), wi = randn(s.C, 20), bi = randn(s.C, 21), di = randn(nc, 22),
         dxi = randn(nc, 23), dwi = randn(s.C, 24), dbi = randn(s.C, 25);
    Pair x(*cpu_, *gpu_, nc, &xi), w(*cpu_, *gpu_, s.C, &wi), b(*cpu_, *gpu_, s.C, &bi),
        dy(*cpu_, *gpu_, nc, &di), out(*cpu_, *gpu_, nc), mean(*cpu_, *gpu_, s.N),
        rstd(*cpu_, *gpu_, s.N);
    // Saved statistics from the CPU forward on both sides, so the backward is compared alone.
    cpu_->layernorm_forward(out.c, mean.c, rstd.c, x.c, w.c, b.c, s.N, s.C);
    mean.set(mean.host_cpu());
    rstd.set(rstd.host_cpu());
    const std::vector<float> garbage = randn(nc, 26);
    for (int mask = 0; mask < 16; mask++) {  // bit 3: dres in a buffer of its own (dinp overwritten)
      const std::string t = tag + " mask=" + std::to_string(mask);
      const bool wdx = mask & 1, wdw = mask & 2, wdb = mask & 4, own = mask & 8;
      if (own && !wdx) continue;
      Pair dx(*cpu_, *gpu_, nc, own ? &garbage : &dxi), res(*cpu_, *gpu_, nc, &dxi),
          dw(*cpu_, *gpu_, s.C, &dwi), db(*cpu_, *gpu_, s.C, &dbi);
      cpu_->layernorm_backward(wdx ? dx.c : nullptr, wdx ? (own ? res.c : dx.c) : nullptr,
                               wdw ? dw.c : nullptr, wdb ? db.c : nullptr, dy.c, x.c, w.c, mean.c, rstd.c,
                               s.N, s.C);
      gpu_->layernorm_backward(wdx ? dx.g : nullptr, wdx ? (own ? res.g : dx.g) : nullptr,
                               wdw ? dw.g : nullptr, wdb ? db.g : nullptr, dy.g, x.g, w.g, mean.g, rstd.g,
                               s.N, s.C);
      dx.expect(kReduce, "layernorm_backward dinp" + t);
      dw.expect(kReduce, "layernorm_backward dweight" + t);
      db.expect(kReduce, "layernorm_backward dbias" + t);
    }
  }
}

struct AttShape {
  int B, T, C, NH;
};
const AttShape kAttShapes[] = {{1, 1, 4, 1}, {2, 7, 12, 3}, {3, 64, 64, 4}, {1, 129, 96, 2}, {2, 256, 128, 2}};

TEST_F(CudaOps, Attention) {
  for (auto s : kAttShapes) {
    const std::string tag = " B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) +
                            " C=" + std::to_string(s.C) + " NH=" + std::to_string(s.NH);
    const size_t nqkv = size_t(s.B) * s.T * 3 * s.C, nout = size_t(s.B) * s.T * s.C,
                 natt = size_t(s.B) * s.NH * s.T * s.T;
    auto qi = randn(nqkv, 26), di = randn(nout, 27);
    Pair qkv(*cpu_, *gpu_, nqkv, &qi), dout(*cpu_, *gpu_, nout, &di), out(*cpu_, *gpu_, nout),
        att(*cpu_, *gpu_, natt), dqkv(*cpu_, *gpu_, nqkv, &qi /* poison: must be overwritten */);
    cpu_->attention_forward(out.c, att.c, qkv.c, s.B, s.T, s.C, s.NH);
    gpu_->attention_forward(out.g, att.g, qkv.g, s.B, s.T, s.C, s.NH);
    att.expect(kAttention, "attention_forward att" + tag);
    out.expect(kAttention, "attention_forward out" + tag);
    // Backward from the same saved probabilities on both sides.
    att.set(att.host_cpu());
    cpu_->attention_backward(dqkv.c, dout.c, out.c, qkv.c, att.c, s.B, s.T, s.C, s.NH);
    gpu_->attention_backward(dqkv.g, dout.g, out.g, qkv.g, att.g, s.B, s.T, s.C, s.NH);
    dqkv.expect(kAttention, "attention_backward dqkv" + tag);
  }
}

TEST_F(CudaOps, EmbeddingWithVocabRange) {
  struct S {
    int B, T, C, V, vocab_start, vocab_rows;
    bool wpe;
  };
  for (S s : {S{1, 1, 1, 3, 0, 3, true}, S{2, 9, 33, 7, 0, 7, true}, S{4, 64, 96, 50, 10, 20, true},
              S{3, 17, 300, 11, 5, 6, false}, S{8, 128, 64, 5, 0, 5, true}}) {
    const std::string tag = " B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) +
                            " C=" + std::to_string(s.C) + " range=" + std::to_string(s.vocab_start) +
                            "+" + std::to_string(s.vocab_rows);
    const int N = s.B * s.T;
    Rng rng(28);
    std::vector<int32_t> tok(N);
    for (auto& t : tok) t = int32_t(rng.below(s.V));  // small V: many repeated tokens
    IntPair tokens(*cpu_, *gpu_, tok);
    auto wtei = randn(size_t(s.vocab_rows) * s.C, 29), wpei = randn(size_t(s.T) * s.C, 30),
         di = randn(size_t(N) * s.C, 31), dwtei = randn(wtei.size(), 32), dwpei = randn(wpei.size(), 33);
    Pair wte(*cpu_, *gpu_, wtei.size(), &wtei), wpe(*cpu_, *gpu_, wpei.size(), &wpei),
        out(*cpu_, *gpu_, size_t(N) * s.C), dout(*cpu_, *gpu_, di.size(), &di),
        dwte(*cpu_, *gpu_, dwtei.size(), &dwtei), dwpe(*cpu_, *gpu_, dwpei.size(), &dwpei);
    cpu_->embedding_forward(out.c, tokens.c, wte.c, s.wpe ? wpe.c : nullptr, s.B, s.T, s.C,
                            s.vocab_start, s.vocab_rows);
    gpu_->embedding_forward(out.g, tokens.g, wte.g, s.wpe ? wpe.g : nullptr, s.B, s.T, s.C,
                            s.vocab_start, s.vocab_rows);
    out.expect(kExact, "embedding_forward" + tag);
    cpu_->embedding_backward(dwte.c, s.wpe ? dwpe.c : nullptr, dout.c, tokens.c, nullptr, s.B, s.T, s.C,
                             s.vocab_start, s.vocab_rows);
    gpu_->embedding_backward(dwte.g, s.wpe ? dwpe.g : nullptr, dout.g, tokens.g,
                             /*tokens_host: copied back from the device*/ nullptr, s.B, s.T, s.C,
                             s.vocab_start, s.vocab_rows);
    // Same summation order as the CPU (positions ascending, into the existing value): exact.
    dwte.expect(kExact, "embedding_backward dwte" + tag);
    dwpe.expect(kExact, "embedding_backward dwpe" + tag);
  }
}

TEST_F(CudaOps, SoftmaxCrossEntropy) {
  struct S {
    int N, V, Vp;
  };
  for (S s : {S{1, 1, 1}, S{5, 37, 128}, S{64, 1000, 1024}, S{33, 50257, 50304}}) {
    for (int mode = 0; mode < 3; mode++) {  // 0: no gradient, 1: separate dlogits, 2: in place
      const std::string tag = " N=" + std::to_string(s.N) + " V=" + std::to_string(s.V) +
                              " Vp=" + std::to_string(s.Vp) + " mode=" + std::to_string(mode);
      Rng rng(34);
      std::vector<int32_t> tgt(s.N);
      for (int n = 0; n < s.N; n++) tgt[n] = (n % 5 == 3) ? -1 : int32_t(rng.below(s.V));
      IntPair targets(*cpu_, *gpu_, tgt);
      auto li = randn(size_t(s.N) * s.Vp, 35, 3.0f);
      Pair logits(*cpu_, *gpu_, li.size(), &li), losses(*cpu_, *gpu_, s.N),
          dl(*cpu_, *gpu_, li.size(), &li);
      float* dc = mode == 0 ? nullptr : mode == 1 ? dl.c : logits.c;
      float* dg = mode == 0 ? nullptr : mode == 1 ? dl.g : logits.g;
      const float dloss = 1.0f / s.N;
      cpu_->softmax_cross_entropy(losses.c, dc, logits.c, targets.c, s.N, s.V, s.Vp, dloss);
      gpu_->softmax_cross_entropy(losses.g, dg, logits.g, targets.g, s.N, s.V, s.Vp, dloss);
      losses.expect(kReduce, "softmax_cross_entropy losses" + tag);
      if (mode == 1) dl.expect(kReduce, "softmax_cross_entropy dlogits" + tag);
      if (mode == 2) logits.expect(kReduce, "softmax_cross_entropy dlogits in place" + tag);
    }
  }
}

TEST_F(CudaOps, VocabParallelPasses) {
  struct S {
    int N, V_local, Vl, vocab_start, V;
  };
  for (S s : {S{4, 0, 128, 64, 200}, S{7, 37, 128, 0, 100}, S{7, 63, 64, 37, 100}, S{40, 1000, 1024, 3000, 5000}}) {
    for (int mode = 0; mode < 3; mode++) {
      const std::string tag = " N=" + std::to_string(s.N) + " V_local=" + std::to_string(s.V_local) +
                              " start=" + std::to_string(s.vocab_start) + " mode=" + std::to_string(mode);
      Rng rng(36);
      std::vector<int32_t> tgt(s.N);
      for (int n = 0; n < s.N; n++) tgt[n] = (n % 4 == 1) ? -1 : int32_t(rng.below(s.V));
      // Some targets certainly inside this shard.
      if (s.V_local > 0) tgt[0] = s.vocab_start + s.V_local - 1;
      IntPair targets(*cpu_, *gpu_, tgt);
      auto li = randn(size_t(s.N) * s.Vl, 37, 3.0f);
      Pair logits(*cpu_, *gpu_, li.size(), &li), maxv(*cpu_, *gpu_, s.N), sumexp(*cpu_, *gpu_, s.N),
          tl(*cpu_, *gpu_, s.N), losses(*cpu_, *gpu_, s.N), dl(*cpu_, *gpu_, li.size(), &li);
      cpu_->logits_row_max(maxv.c, logits.c, s.N, s.V_local, s.Vl);
      gpu_->logits_row_max(maxv.g, logits.g, s.N, s.V_local, s.Vl);
      maxv.expect(kExact, "logits_row_max" + tag);
      if (s.V_local == 0) {
        // Another rank supplies the global max: use a finite one.
        std::vector<float> m(s.N, 1.5f);
        maxv.set(m);
      }
      cpu_->logits_sumexp_target(sumexp.c, tl.c, logits.c, maxv.c, targets.c, s.N, s.V_local, s.Vl,
                                 s.vocab_start);
      gpu_->logits_sumexp_target(sumexp.g, tl.g, logits.g, maxv.g, targets.g, s.N, s.V_local, s.Vl,
                                 s.vocab_start);
      sumexp.expect(kReduce, "logits_sumexp_target sumexp" + tag);
      tl.expect(kExact, "logits_sumexp_target target_logit" + tag);
      // Finish from identical global statistics (as after the all-reduces); sumexp > 0.
      std::vector<float> se = sumexp.host_cpu();
      for (auto& x : se) x += 1.0f;
      sumexp.set(se);
      float* dc = mode == 0 ? nullptr : mode == 1 ? dl.c : logits.c;
      float* dg = mode == 0 ? nullptr : mode == 1 ? dl.g : logits.g;
      cpu_->cross_entropy_finish(losses.c, dc, logits.c, maxv.c, sumexp.c, tl.c, targets.c, s.N,
                                 s.V_local, s.Vl, s.vocab_start, 0.25f);
      gpu_->cross_entropy_finish(losses.g, dg, logits.g, maxv.g, sumexp.g, tl.g, targets.g, s.N,
                                 s.V_local, s.Vl, s.vocab_start, 0.25f);
      losses.expect(kReduce, "cross_entropy_finish losses" + tag);
      if (mode == 1) dl.expect(kReduce, "cross_entropy_finish dlogits" + tag);
      if (mode == 2) logits.expect(kReduce, "cross_entropy_finish dlogits in place" + tag);
    }
  }
}

TEST_F(CudaOps, AdamW) {
  for (size_t n : {size_t(1), size_t(4097), size_t(300001)}) {
    auto pi = randn(n, 38), gi = randn(n, 39, 0.01f);
    Pair p(*cpu_, *gpu_, n, &pi), g(*cpu_, *gpu_, n, &gi), m(*cpu_, *gpu_, n), v(*cpu_, *gpu_, n);
    for (int64_t step = 1; step <= 3; step++) {
      AdamWArgs a;
      a.lr = 1e-3f;
      a.weight_decay = 0.1f;
      a.step = step;
      a.grad_scale = 0.5f;
      cpu_->adamw_step(p.c, g.c, m.c, v.c, n, a);
      gpu_->adamw_step(p.g, g.g, m.g, v.g, n, a);
      // Keep the states identical so each step is compared alone.
      const std::string tag = " n=" + std::to_string(n) + " step=" + std::to_string(step);
      m.expect(kAdamParam, "adamw m" + tag);
      v.expect(kAdamParam, "adamw v" + tag);
      p.expect(kAdamParam, "adamw param" + tag);
      m.set(m.host_cpu());
      v.set(v.host_cpu());
      p.set(p.host_cpu());
    }
  }
}

// The multi-tensor AdamW (one launch for every segment): the bits of adamw_step per segment on the
// GPU, and the CPU's adamw_step_segments within the AdamW tolerance; steps reuse the uploaded
// table, a changed list (another weight decay) replaces it.
TEST_F(CudaOps, AdamWStepSegmentsIsOneLaunchOfThePerSegmentBits) {
  const std::vector<size_t> lens = {1, 0, 2047, 2049, 300001, 768, 5};
  std::vector<AdamWSegment> segs;
  size_t flat = 3, state = 0;
  for (size_t i = 0; i < lens.size(); i++) {
    segs.push_back({.flat = flat, .state = state, .n = lens[i], .weight_decay = i % 2 ? 0.1f : 0.0f});
    flat += lens[i] + 13;  // gaps between the tensors stay untouched
    state += lens[i];
  }
  auto pi = randn(flat, 40), gi = randn(flat, 41, 0.01f);
  Pair p(*cpu_, *gpu_, flat, &pi), g(*cpu_, *gpu_, flat, &gi), m(*cpu_, *gpu_, state), v(*cpu_, *gpu_, state);
  Pair q(*cpu_, *gpu_, flat, &pi), mq(*cpu_, *gpu_, state), vq(*cpu_, *gpu_, state);  // per segment
  for (int64_t step = 1; step <= 4; step++) {
    if (step == 4)
      for (auto& s : segs) s.weight_decay += 0.05f;
    AdamWArgs a;
    a.lr = 1e-3f;
    a.step = step;
    a.grad_scale = 0.5f;
    a.weight_decay = 7.0f;  // replaced by each segment's
    const long long k = emu_launches([&] { gpu_->adamw_step_segments(p.g, g.g, m.g, v.g, segs, a); });
    if (k >= 0) EXPECT_EQ(k, 1) << "step " << step;
    cpu_->adamw_step_segments(p.c, g.c, m.c, v.c, segs, a);
    for (const AdamWSegment& s : segs) {
      AdamWArgs b = a;
      b.weight_decay = s.weight_decay;
      gpu_->adamw_step(q.g + s.flat, g.g + s.flat, mq.g + s.state, vq.g + s.state, s.n, b);
    }
    const std::string tag = " step=" + std::to_string(step);
    EXPECT_EQ(p.host_gpu(), q.host_gpu()) << "params vs per segment" << tag;
    EXPECT_EQ(m.host_gpu(), mq.host_gpu()) << "m vs per segment" << tag;
    EXPECT_EQ(v.host_gpu(), vq.host_gpu()) << "v vs per segment" << tag;
    m.expect(kAdamParam, "adamw_step_segments m" + tag);
    v.expect(kAdamParam, "adamw_step_segments v" + tag);
    p.expect(kAdamParam, "adamw_step_segments param" + tag);
    m.set(m.host_cpu());  // compare each step alone
    v.set(v.host_cpu());
    p.set(p.host_cpu());
    mq.set(m.host_cpu());
    vq.set(v.host_cpu());
    q.set(p.host_cpu());
  }
  const auto gaps = p.host_gpu();
  for (size_t i = 0; i + 1 < segs.size(); i++)
    for (size_t j = segs[i].flat + segs[i].n; j < segs[i + 1].flat; j++) ASSERT_EQ(gaps[j], pi[j]) << "gap " << j;
}

// The optimizer calls adamw_step_segments: on the GPU its parameters after three steps are the
// bits of the per-segment calls (the optimizer's former loop) with the same arguments.
TEST_F(CudaOps, AdamWOptimizerIsThePerSegmentLoop) {
  const std::vector<UpdateSegment> segs = {{.flat = 0, .state = 0, .n = 1000, .decay = true},
                                           {.flat = 1000, .state = 1000, .n = 5000, .decay = false},
                                           {.flat = 8000, .state = 6000, .n = 4097, .decay = true}};
  const size_t flat = 12097, state = 10097;
  OptimConfig cfg;
  cfg.weight_decay = 0.1;
  auto pi = randn(flat, 42), gi = randn(flat, 43, 0.01f);
  Pair p(*cpu_, *gpu_, flat, &pi), g(*cpu_, *gpu_, flat, &gi), q(*cpu_, *gpu_, flat, &pi), m(*cpu_, *gpu_, state),
      v(*cpu_, *gpu_, state);
  AdamW opt(*gpu_, segs, state, cfg);
  for (int64_t step = 1; step <= 3; step++) {
    opt.step(p.g, g.g, 1e-3, 0.5f, step);
    AdamWArgs a;
    a.lr = 1e-3f;
    a.beta1 = float(cfg.beta1);
    a.beta2 = float(cfg.beta2);
    a.eps = float(cfg.eps);
    a.step = step;
    a.grad_scale = 0.5f;
    for (const UpdateSegment& s : segs) {
      a.weight_decay = s.decay ? 0.1f : 0.0f;
      gpu_->adamw_step(q.g + s.flat, g.g + s.flat, m.g + s.state, v.g + s.state, s.n, a);
    }
  }
  EXPECT_EQ(p.host_gpu(), q.host_gpu());
}

TEST_F(CudaOps, OpsAreDeterministic) {
  const int B = 2, T = 65, C = 96, NH = 3, V = 9;
  const size_t nqkv = size_t(B) * T * 3 * C, nout = size_t(B) * T * C;
  auto qi = randn(nqkv, 40), di = randn(nout, 41);
  Pair qkv(*cpu_, *gpu_, nqkv, &qi), dout(*cpu_, *gpu_, nout, &di), out(*cpu_, *gpu_, nout),
      att(*cpu_, *gpu_, size_t(B) * NH * T * T), dqkv(*cpu_, *gpu_, nqkv);
  Rng rng(42);
  std::vector<int32_t> tok(B * T);
  for (auto& t : tok) t = int32_t(rng.below(V));
  IntPair tokens(*cpu_, *gpu_, tok);
  auto run = [&] {
    std::vector<std::vector<float>> r;
    gpu_->attention_forward(out.g, att.g, qkv.g, B, T, C, NH);
    gpu_->attention_backward(dqkv.g, dout.g, out.g, qkv.g, att.g, B, T, C, NH);
    r.push_back(out.host_gpu());
    r.push_back(dqkv.host_gpu());
    Pair dwte(*cpu_, *gpu_, size_t(V) * C), dwpe(*cpu_, *gpu_, size_t(T) * C), mean(*cpu_, *gpu_, nout / C),
        rstd(*cpu_, *gpu_, nout / C), w(*cpu_, *gpu_, C), dw(*cpu_, *gpu_, C), db(*cpu_, *gpu_, C),
        dx(*cpu_, *gpu_, nout);
    w.set(randn(C, 43));
    gpu_->embedding_backward(dwte.g, dwpe.g, dout.g, tokens.g, nullptr, B, T, C, 0, V);
    gpu_->layernorm_forward(dx.g, mean.g, rstd.g, out.g, w.g, w.g, B * T, C);
    gpu_->layernorm_backward(dx.g, dx.g, dw.g, db.g, dout.g, out.g, w.g, mean.g, rstd.g, B * T, C);
    r.push_back(dwte.host_gpu());
    r.push_back(dwpe.host_gpu());
    r.push_back(dx.host_gpu());
    r.push_back(dw.host_gpu());
    r.push_back(db.host_gpu());
    return r;
  };
  const auto a = run(), b = run();
  for (size_t i = 0; i < a.size(); i++)
    EXPECT_EQ(0, std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float))) << "output " << i;
}

// ---- a tiny GPT end to end ----

GptDims tiny_dims() {
  GptDims d;
  d.n_layer = 2;
  d.n_head = 3;
  d.d_model = 48;
  d.seq_len = 33;
  d.vocab = 101;
  d.vocab_padded = pad_vocab(d.vocab);
  return d;
}

struct StepResult {
  double loss;
  std::vector<float> grads;
};

StepResult run_step(Backend& be, const GptDims& d, int B, int T, const std::vector<int32_t>& x,
                    const std::vector<int32_t>& y, int steps = 1) {
  SequentialModel m(make_gpt(d), be);
  m.init_weights(7);
  m.reserve(B, T, 1);
  StepResult r{};
  for (int s = 0; s < steps; s++) {
    m.zero_grads();
    r.loss = m.forward(0, MicroBatch{.B = B, .T = T, .tokens = x.data(), .targets = y.data()}, true, 1.0f / (B * T));
    m.backward(0);
  }
  r.grads.resize(m.flat_size());
  be.to_host(r.grads.data(), m.grads(), r.grads.size() * sizeof(float));
  return r;
}

TEST_F(CudaOps, TinyGptLossAndGradientsMatchCpu) {
  const GptDims d = tiny_dims();
  const int B = 3, T = 33;
  Rng rng(44);
  std::vector<int32_t> x(B * T), y(B * T);
  for (auto& t : x) t = int32_t(rng.below(d.vocab));
  for (auto& t : y) t = int32_t(rng.below(d.vocab));
  y[5] = -1;  // an ignored target
  const StepResult c = run_step(*cpu_, d, B, T, x, y), g = run_step(*gpu_, d, B, T, x, y);
  EXPECT_NEAR(g.loss, c.loss, 1e-5 * std::fabs(c.loss));
  SequentialModel layout(make_gpt(d), *cpu_);
  const ParamTable& table = layout.table();
  for (int i = 0; i < table.size(); i++) {
    const size_t n = table.numel(i);
    const float* gp = table.at(g.grads.data(), i);
    const float* cp = table.at(c.grads.data(), i);
    std::vector<float> gg(gp, gp + n), cc(cp, cp + n);
    expect_close(gg, cc, kModel, "gradient of " + table.spec(i).name);
  }
}

TEST_F(CudaOps, TinyGptIsDeterministicAndStopsAllocating) {
  const GptDims d = tiny_dims();
  const int B = 2, T = 32;
  Rng rng(45);
  std::vector<int32_t> x(B * T), y(B * T);
  for (auto& t : x) t = int32_t(rng.below(d.vocab));
  for (auto& t : y) t = int32_t(rng.below(d.vocab));
  const StepResult a = run_step(*gpu_, d, B, T, x, y), b = run_step(*gpu_, d, B, T, x, y);
  EXPECT_EQ(a.loss, b.loss);
  ASSERT_EQ(a.grads.size(), b.grads.size());
  EXPECT_EQ(0, std::memcmp(a.grads.data(), b.grads.data(), a.grads.size() * sizeof(float)));

  // After a warm-up step, further steps make no cudaMalloc.
  SequentialModel m(make_gpt(d), *gpu_);
  m.init_weights(7);
  m.reserve(B, T, 1);
  auto step = [&] {
    m.zero_grads();
    m.forward(0, MicroBatch{.B = B, .T = T, .tokens = x.data(), .targets = y.data()}, true, 1.0f / (B * T));
    m.backward(0);
    gpu_->sum_squares(m.grads(), m.flat_size());
  };
  step();
  const int mallocs = cuda_memory_stats(*gpu_).device_mallocs;
  for (int i = 0; i < 3; i++) step();
  EXPECT_EQ(cuda_memory_stats(*gpu_).device_mallocs, mallocs);
}

// hetero.memory_limit on a GPU rank (a smaller device emulated on this one): the arena's bytes in
// use never pass the limit, the error is the CPU backend's, released memory counts no more, and a
// limit beyond the device's memory leaves the device as the limit.
TEST_F(CudaOps, MemoryLimitBoundsTheArena) {
  const size_t base = cuda_memory_stats(*gpu_).in_use_bytes;  // the backend's own workspaces
  gpu_->set_memory_limit({.bytes = base + (size_t{1} << 20), .rank = 3, .device = "QUADRO-P4000"});
  void* a = gpu_->alloc(600 << 10);
  try {
    gpu_->alloc(500 << 10);
    FAIL() << "an allocation beyond the limit was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("out of memory on rank 3 (emulating QUADRO-P4000)"), std::string::npos) << what;
    EXPECT_NE(what.find("allocating 500 KiB"), std::string::npos) << what;
    EXPECT_NE(e.hint().find("hetero.memory_limit"), std::string::npos) << e.hint();
  }
  gpu_->release(a);
  void* b = gpu_->alloc(1000 << 10);  // fits once `a` is back
  gpu_->release(b);
  // Below what is in use already: refused at once.
  EXPECT_THROW(gpu_->set_memory_limit({.bytes = base / 2, .rank = 3}), Error);
  // More than the device has: the device is the limit (a warning), 1 MiB more is accepted.
  size_t free = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  gpu_->set_memory_limit({.bytes = total + 1, .rank = 3});
  void* c = gpu_->alloc(size_t{2} << 20);
  gpu_->release(c);
}

TEST(CudaChoice, ExplicitCudaNeedsADevice) {
  BATON_GPU_TEST_OR_SKIP();
  auto be = make_cuda_backend();
  EXPECT_EQ(be->name(), "cuda");
}

}  // namespace
}  // namespace baton
