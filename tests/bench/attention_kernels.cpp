// Benchmark, not a test: the CPU attention ops (src/backend/cpu/cpu_attention.cpp) at one layer of
// the long-sequence case (B 2, T 1024, C 256, 4 heads — tests/bench/cpu_side_by_side.py's
// gpt-seq1024), fp32, once per kernel instruction set this CPU runs (baseline SSE2, AVX2, AVX-512),
// best of 10 calls. The measurement behind the register tiles' shapes (docs/benchmarks.md "Long
// sequences").
//   OMP_NUM_THREADS=2 build/tests/bench_attention_kernels
// glibc's malloc thresholds are raised first, as they are inside a training step (its dynamic
// threshold rises after the first large free): otherwise the backward's per-call T x T blocks are
// fresh mappings that page-fault on every call, a cost a training step does not pay.
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "backend/cpu/cpu_ops.h"

int main() {
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
  using baton::cpu_detail::KernelIsa;
  const int B = 2, T = 1024, C = 256, NH = 4;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> qkv(size_t(B) * T * 3 * C), out(size_t(B) * T * C), att(size_t(B) * NH * T * T),
      dout(out.size()), dqkv(qkv.size());
  for (float& x : qkv) x = normal(rng);
  for (float& x : dout) x = normal(rng);
  baton::CpuOps ops;
  const KernelIsa saved = baton::cpu_detail::kernel_isa();
  std::printf("attention B %d T %d C %d heads %d, fp32: best of 10 calls (ms)\n", B, T, C, NH);
  for (KernelIsa isa : {KernelIsa::BASE, KernelIsa::AVX2, KernelIsa::AVX512}) {
    if (!baton::cpu_detail::set_kernel_isa(isa)) continue;
    ops.attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);  // warm-up
    ops.attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
    double fwd = 1e9, bwd = 1e9;
    for (int r = 0; r < 10; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      ops.attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
      const auto t1 = std::chrono::steady_clock::now();
      ops.attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
      const auto t2 = std::chrono::steady_clock::now();
      fwd = std::min(fwd, std::chrono::duration<double, std::milli>(t1 - t0).count());
      bwd = std::min(bwd, std::chrono::duration<double, std::milli>(t2 - t1).count());
    }
    const char* name = isa == KernelIsa::BASE ? "sse2" : isa == KernelIsa::AVX2 ? "avx2" : "avx512";
    std::printf("%-7s forward %7.2f  backward %7.2f\n", name, fwd, bwd);
  }
  baton::cpu_detail::set_kernel_isa(saved);
  return 0;
}
