// Native bf16 dense layers through oneDNN matmul; see cpu_bf16_matmul.h.
#include "backend/cpu/cpu_bf16_matmul.h"

#include <algorithm>
#include <cstdlib>

#include "backend/backend.h"
#include "backend/cpu/cpu_dnnl_gemm.h"
#include "backend/cpu/cpu_ops.h"
#include "core/error.h"

#include <fmt/format.h>

namespace baton {
namespace {

enum Kind { FWD, FWD_BIAS, DINP, DINP_ACC, DWEIGHT, DWEIGHT_ACC };

}  // namespace

struct CpuBf16Matmul::Impl {
  DnnlGemm gemm;

  // C[M,N] = A[M,K] . B[K,N] for one op of the layer (`kind` fixes the layouts and the epilogue).
  void run(Kind kind, int M, int N, int K, const void* a, const void* b, const void* bias, void* c) {
    using dt = DnnlGemm::dt;
    DnnlGemm::Shape s{dt::bf16, dt::bf16, dt::bf16, false, false, M, N, K, K, N, N, false, false};
    switch (kind) {
      case FWD:
      case FWD_BIAS:  // out[N,OC] = inp[N,C] . weight[OC,C]^T
        s.trans_b = true, s.ldb = K, s.bias = kind == FWD_BIAS;
        break;
      case DINP:
      case DINP_ACC:  // dinp[N,C] = dout[N,OC] . weight[OC,C]
        s.accumulate = kind == DINP_ACC;
        break;
      case DWEIGHT:
      case DWEIGHT_ACC:  // dweight[OC,C] (=|+=) dout[N,OC]^T . inp[N,C]
        s.trans_a = true, s.lda = M, s.c = dt::f32, s.accumulate = kind == DWEIGHT_ACC;
        break;
    }
    gemm.run(s, a, b, bias, c);
  }
};

template <typename F>
void guarded(const char* op, F&& f) {
  try {
    f();
  } catch (const dnnl::error& e) {
    throw Error(fmt::format("oneDNN bf16 {} failed: {}", op, e.what()),
                "this is a bug or an unsupported shape; BATON_CPU_BF16=emulated avoids oneDNN's bf16 matmul");
  }
}

CpuBf16Matmul::CpuBf16Matmul() : impl_(std::make_unique<Impl>()) {}
CpuBf16Matmul::~CpuBf16Matmul() = default;

void CpuBf16Matmul::forward(uint16_t* out, const uint16_t* inp, const uint16_t* weight, const uint16_t* bias,
                            int N, int C, int OC) {
  BATON_ASSERT(N >= 0 && C > 0 && OC > 0, "matmul_forward: bad shape N={} C={} OC={}", N, C, OC);
  if (N == 0) return;
  guarded("matmul forward", [&] {
    impl_->run(bias ? FWD_BIAS : FWD, N, OC, C, inp, weight, bias, out);
  });
}

void CpuBf16Matmul::backward(uint16_t* dinp, float* dweight, float* dbias, const uint16_t* dout,
                             const uint16_t* inp, const uint16_t* weight, int N, int C, int OC,
                             bool accumulate_dinp, bool accumulate_dweight) {
  BATON_ASSERT(N >= 0 && C > 0 && OC > 0, "matmul_backward: bad shape N={} C={} OC={}", N, C, OC);
  if (N == 0) return cpu_detail::empty_param_grads(dweight, dbias, C, OC, accumulate_dweight);
  guarded("matmul backward", [&] {
    if (dinp != nullptr)
      impl_->run(accumulate_dinp ? DINP_ACC : DINP, N, C, OC, dout, weight, nullptr, dinp);
    if (dweight != nullptr)
      impl_->run(accumulate_dweight ? DWEIGHT_ACC : DWEIGHT, OC, C, N, dout, inp, nullptr, dweight);
  });
  if (dbias == nullptr) return;
  // As CpuOps::matmul_backward: column blocks, rows summed in order (deterministic for any thread
  // count), widening each bf16 value (exact) as it is read.
  constexpr int kBlock = cpu_detail::kColBlock;
  const int nblocks = (OC + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (size_t(N) * OC >= cpu_detail::kSerialBelow)
  for (int blk = 0; blk < nblocks; blk++) {
    const int o0 = blk * kBlock, o1 = std::min(OC, o0 + kBlock);
    float acc[kBlock] = {};
    for (int n = 0; n < N; n++) {
      const uint16_t* row = dout + size_t(n) * OC;
#pragma omp simd
      for (int o = o0; o < o1; o++) acc[o - o0] += bf16_to_f32(row[o]);
    }
    for (int o = o0; o < o1; o++) dbias[o] = accumulate_dweight ? dbias[o] + acc[o - o0] : acc[o - o0];
  }
}

}  // namespace baton
