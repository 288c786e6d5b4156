// Benchmark, not a test: each fp32 GEMM of a GPT-2-shape training step (12 layers, d_model 768,
// vocab 8192, B 4 x T 64 = 256 rows) on both CPU engines, OpenBLAS (as baton splits it over OpenMP
// threads) and oneDNN (a cached primitive) — the measurement behind the dense layers' choice of
// engine per product (src/backend/cpu/cpu_matmul.cpp, docs/benchmarks.md "Matmuls").
//   OMP_NUM_THREADS=2 env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE build/tests/bench_gemm_engines
#include <chrono>
#include <cstdio>
#include <vector>

#include "backend/cpu/cpu_ops.h"

namespace {

struct Product {
  const char* name;
  bool trans_a, trans_b;
  int M, N, K;
};

// Seconds per call: one untimed call, then calls until 0.5 s have passed.
template <typename F>
double time_call(F&& f) {
  f();
  int calls = 0;
  const auto t0 = std::chrono::steady_clock::now();
  double elapsed = 0;
  do {
    f();
    calls++;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } while (elapsed < 0.5);
  return elapsed / calls;
}

}  // namespace

int main() {
  using baton::CpuGemm;
  const int R = 256, C = 768, V = 8192;
  const Product products[] = {
      {"forward qkv", false, true, R, 3 * C, C},      {"forward proj", false, true, R, C, C},
      {"forward fc", false, true, R, 4 * C, C},       {"forward fc-proj", false, true, R, C, 4 * C},
      {"forward head", false, true, R, V, C},         {"dinp qkv", false, false, R, C, 3 * C},
      {"dinp fc", false, false, R, C, 4 * C},         {"dinp head", false, false, R, C, V},
      {"dweight qkv", true, false, 3 * C, C, R},      {"dweight fc", true, false, 4 * C, C, R},
      {"dweight fc-proj", true, false, C, 4 * C, R},  {"dweight head", true, false, V, C, R},
      {"square 2048", false, false, 2048, 2048, 2048},
  };
  std::printf("%-16s %6s %6s %6s  %10s %10s  (GFLOP/s)\n", "product", "M", "N", "K", "openblas", "onednn");
  for (const Product& p : products) {
    // op(A) is [M, K]: stored [K, M] when transposed; op(B) is [K, N]: stored [N, K] when transposed.
    const int lda = p.trans_a ? p.M : p.K, ldb = p.trans_b ? p.K : p.N;
    std::vector<float> A(size_t(p.M) * p.K, 0.01f), B(size_t(p.K) * p.N, 0.02f), Cm(size_t(p.M) * p.N, 0.0f);
    double gflops[2];
    for (CpuGemm e : {CpuGemm::OPENBLAS, CpuGemm::ONEDNN}) {
      const double s = time_call([&] {
        baton::cpu_gemm(e, p.trans_a, p.trans_b, p.M, p.N, p.K, A.data(), lda, B.data(), ldb, 1.0f, Cm.data(), p.N);
      });
      gflops[e == CpuGemm::ONEDNN] = 2.0 * p.M * p.N * p.K / s / 1e9;
    }
    std::printf("%-16s %6d %6d %6d  %10.1f %10.1f\n", p.name, p.M, p.N, p.K, gflops[0], gflops[1]);
  }
}
