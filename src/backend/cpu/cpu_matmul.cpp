// CpuBackend dense layer: out[N,OC] = inp[N,C] . weight[OC,C]^T + bias[OC], and its backward.
// The forward and input-gradient products go through oneDNN's matmul (DnnlGemm, one cache per
// thread) — its brgemm kernels run a training step's skinny products (a few hundred rows) 8-19%
// faster than OpenBLAS sgemm on AVX-512 — and the weight gradients, tiny products and everything
// under BATON_CPU_GEMM=openblas through cblas_sgemm, split across OpenMP threads by parallel_sgemm
// with OpenBLAS itself single-threaded (OpenBLAS's own pthread pool and OpenMP's spinning threads
// fight for the cores: sgemm right after any OpenMP loop ran at about half speed). Both use
// OpenMP's one pool and never split K, so a result does not depend on the thread count.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <string_view>

#include "backend/cpu/cpu_dnnl_gemm.h"
#include "backend/cpu/cpu_ops.h"
#include "core/error.h"

#include <fmt/format.h>

namespace baton {
namespace {

thread_local uint64_t onednn_calls = 0;  // cpu_gemm_onednn_calls()

// C[M,N] = op(A)[M,K] . op(B)[K,N] + beta * C (row-major), one sgemm per OpenMP thread on a block
// of C's rows (or columns, when C has few rows, as in sampling).
void parallel_sgemm(bool trans_a, bool trans_b, int M, int N, int K, const float* A, int lda,
                    const float* B, int ldb, float beta, float* C, int ldc) {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
  const auto ta = trans_a ? CblasTrans : CblasNoTrans;
  const auto tb = trans_b ? CblasTrans : CblasNoTrans;
  const int threads = omp_get_max_threads();
  if (threads == 1 || double(M) * N * K < 1 << 18) {
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  const bool split_rows = M >= 16 * threads;
#pragma omp parallel
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int extent = split_rows ? M : N;
    // Blocks of a multiple of 16 so every thread's sgemm works on aligned, full-width panels.
    const int unit = (extent + 16 * nt - 1) / (16 * nt) * 16;
    const int lo = std::min(extent, t * unit), hi = std::min(extent, lo + unit);
    if (hi > lo) {
      if (split_rows)
        cblas_sgemm(CblasRowMajor, ta, tb, hi - lo, N, K, 1.0f, trans_a ? A + lo : A + size_t(lo) * lda,
                    lda, B, ldb, beta, C + size_t(lo) * ldc, ldc);
      else
        cblas_sgemm(CblasRowMajor, ta, tb, M, hi - lo, K, 1.0f, A, lda,
                    trans_b ? B + size_t(lo) * ldb : B + lo, ldb, beta, C + lo, ldc);
    }
  }
}

}  // namespace

CpuGemm cpu_gemm_engine() {
  const char* knob = std::getenv("BATON_CPU_GEMM");
  const std::string_view v = knob ? knob : "";
  if (v.empty() || v == "onednn") return CpuGemm::ONEDNN;
  if (v == "openblas") return CpuGemm::OPENBLAS;
  throw Error(fmt::format("BATON_CPU_GEMM = \"{}\" is not a CPU GEMM engine", v),
              "use \"onednn\" (the default) or \"openblas\"");
}

uint64_t cpu_gemm_onednn_calls() { return onednn_calls; }

void cpu_gemm(CpuGemm engine, bool trans_a, bool trans_b, int M, int N, int K, const float* A, int lda,
              const float* B, int ldb, float beta, float* C, int ldc) {
  BATON_ASSERT(beta == 0.0f || beta == 1.0f, "cpu_gemm: beta {} is neither 0 nor 1", beta);
  if (engine == CpuGemm::OPENBLAS) return parallel_sgemm(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc);
  thread_local DnnlGemm dnnl_gemm;
  onednn_calls++;
  using dt = DnnlGemm::dt;
  const DnnlGemm::Shape s{dt::f32, dt::f32, dt::f32, trans_a, trans_b, M, N, K, lda, ldb, ldc, beta != 0, false};
  try {
    dnnl_gemm.run(s, A, B, nullptr, C);
  } catch (const dnnl::error& e) {
    throw Error(fmt::format("oneDNN fp32 matmul {}x{}x{} failed: {}", M, N, K, e.what()),
                "this is a bug or an unsupported shape; BATON_CPU_GEMM=openblas runs the products in OpenBLAS");
  }
}

namespace {

// The fp32 products of the dense layers. oneDNN for the forward and input-gradient products from
// 2^18 multiply-adds up; OpenBLAS for tiny ones (a primitive's call costs more than the whole
// product), for the weight gradients (op(A) = dout^T, K = the rows: OpenBLAS was as fast or up to
// 11% faster there, docs/benchmarks.md) and for everything under BATON_CPU_GEMM=openblas.
void gemm(bool trans_a, bool trans_b, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
          float beta, float* C, int ldc) {
  const bool openblas = cpu_gemm_engine() == CpuGemm::OPENBLAS || trans_a || double(M) * N * K < 1 << 18;
  cpu_gemm(openblas ? CpuGemm::OPENBLAS : CpuGemm::ONEDNN, trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace

void CpuOps::matmul_forward(float* out, const float* inp, const float* weight,
                                const float* bias, int N, int C, int OC) {
  BATON_ASSERT(N >= 0 && C > 0 && OC > 0, "matmul_forward: bad shape N={} C={} OC={}", N, C, OC);
  if (N == 0) return;
  float beta = 0.0f;
  if (bias != nullptr) {
    // Seed out with the bias and let sgemm accumulate onto it (beta = 1): one pass over out.
#pragma omp parallel for schedule(static) if (size_t(N) * OC >= cpu_detail::kSerialBelow)
    for (int n = 0; n < N; n++) std::copy(bias, bias + OC, out + size_t(n) * OC);
    beta = 1.0f;
  }
  // out[N,OC] = inp[N,C] . weight[OC,C]^T
  gemm(false, true, N, OC, C, inp, C, weight, C, beta, out, OC);
}

void CpuOps::matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                                 const float* inp, const float* weight, int N, int C, int OC,
                                 bool accumulate_dinp, bool accumulate_dweight) {
  BATON_ASSERT(N >= 0 && C > 0 && OC > 0, "matmul_backward: bad shape N={} C={} OC={}", N, C, OC);
  if (N == 0) return cpu_detail::empty_param_grads(dweight, dbias, C, OC, accumulate_dweight);
  // dinp[N,C] (=|+=) dout[N,OC] . weight[OC,C]
  if (dinp != nullptr)
    gemm(false, false, N, C, OC, dout, OC, weight, C, accumulate_dinp ? 1.0f : 0.0f, dinp, C);
  // dweight[OC,C] (+=|=) dout[N,OC]^T . inp[N,C]   (skipped when null: zero bubble's input part)
  if (dweight != nullptr) gemm(true, false, OC, C, N, dout, OC, inp, C, accumulate_dweight ? 1.0f : 0.0f, dweight, C);
  if (dbias != nullptr) {
    // dbias[OC] (+=|=) sum_n dout[n,:]. Parallel over column blocks, rows summed in order inside each
    // block: deterministic for any thread count, and the inner loop is contiguous.
    const int nblocks = (OC + cpu_detail::kColBlock - 1) / cpu_detail::kColBlock;
#pragma omp parallel for schedule(static) if (size_t(N) * OC >= cpu_detail::kSerialBelow)
    for (int blk = 0; blk < nblocks; blk++) {
      const int o0 = blk * cpu_detail::kColBlock;
      const int o1 = std::min(OC, o0 + cpu_detail::kColBlock);
      float acc[cpu_detail::kColBlock] = {};
      for (int n = 0; n < N; n++) {
        const float* row = dout + size_t(n) * OC;
#pragma omp simd
        for (int o = o0; o < o1; o++) acc[o - o0] += row[o];
      }
      for (int o = o0; o < o1; o++) dbias[o] = accumulate_dweight ? dbias[o] + acc[o - o0] : acc[o - o0];
    }
  }
}

}  // namespace baton
