// Native bf16 dense layers through oneDNN matmul; see cpu_bf16_matmul.h.
#include "backend/cpu/cpu_bf16_matmul.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <map>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>

#include "backend/backend.h"
#include "backend/cpu/cpu_ops.h"
#include "core/error.h"

#include <fmt/format.h>

namespace baton {
namespace {

using dnnl::memory;
using dt = memory::data_type;

// Row-major [rows, cols] with leading dimension ld; transposed: the [cols, rows] array read as
// its transpose (oneDNN takes the strides, so no copy is made).
memory::desc mat(int rows, int cols, int ld, dt t, bool transposed = false) {
  return transposed ? memory::desc({rows, cols}, t, {1, ld}) : memory::desc({rows, cols}, t, {ld, 1});
}

enum Kind { FWD, FWD_BIAS, DINP, DINP_ACC, DWEIGHT };

struct Gemm {
  dnnl::matmul p;
  memory src, wei, bias, dst, scratch;
};

}  // namespace

struct CpuBf16Matmul::Impl {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  std::map<std::array<int, 4>, Gemm> cache;  // {kind, M, N, K}
  void* scratch = nullptr;  // shared by every primitive (they run one at a time)
  size_t scratch_bytes = 0;

  ~Impl() { std::free(scratch); }

  // C[M,N] = A[M,K] . B[K,N] for one op of the layer (`kind` fixes the layouts and the epilogue).
  Gemm& get(Kind kind, int M, int N, int K) {
    const std::array<int, 4> key{kind, M, N, K};
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
    memory::desc a, b, c, bias;
    switch (kind) {
      case FWD:
      case FWD_BIAS:  // out[N,OC] = inp[N,C] . weight[OC,C]^T
        a = mat(M, K, K, dt::bf16), b = mat(K, N, K, dt::bf16, true), c = mat(M, N, N, dt::bf16);
        if (kind == FWD_BIAS) bias = memory::desc({1, N}, dt::bf16, {N, 1});
        break;
      case DINP:
      case DINP_ACC:  // dinp[N,C] = dout[N,OC] . weight[OC,C]
        a = mat(M, K, K, dt::bf16), b = mat(K, N, N, dt::bf16), c = mat(M, N, N, dt::bf16);
        break;
      case DWEIGHT:  // dweight[OC,C] += dout[N,OC]^T . inp[N,C]
        a = mat(M, K, M, dt::bf16, true), b = mat(K, N, N, dt::bf16), c = mat(M, N, N, dt::f32);
        break;
    }
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (kind == DINP_ACC || kind == DWEIGHT) {
      dnnl::post_ops po;
      po.append_sum(1.0f);  // C += A.B: the sum is formed in fp32 and rounded once on store
      attr.set_post_ops(po);
    }
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, bias, c), attr, eng);
    Gemm& g = cache[key];
    g.p = dnnl::matmul(pd);
    g.src = memory(a, eng, nullptr);
    g.wei = memory(b, eng, nullptr);
    g.dst = memory(c, eng, nullptr);
    if (kind == FWD_BIAS) g.bias = memory(bias, eng, nullptr);
    const memory::desc sd = pd.scratchpad_desc();
    if (sd.get_size() > scratch_bytes) {
      std::free(scratch);
      scratch_bytes = (sd.get_size() + 4095) / 4096 * 4096;
      scratch = std::aligned_alloc(4096, scratch_bytes);
      BATON_REQUIRE(scratch, fmt::format("out of memory for a {} byte oneDNN scratchpad", scratch_bytes),
                    "use a smaller micro-batch");
    }
    g.scratch = memory(sd, eng, nullptr);
    return g;
  }

  void run(Gemm& g, const void* a, const void* b, const void* bias, void* c) {
    g.src.set_data_handle(const_cast<void*>(a));
    g.wei.set_data_handle(const_cast<void*>(b));
    g.dst.set_data_handle(c);
    g.scratch.set_data_handle(scratch);  // the shared buffer may have grown since g was built
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, g.src}, {DNNL_ARG_WEIGHTS, g.wei},
                                         {DNNL_ARG_DST, g.dst}, {DNNL_ARG_SCRATCHPAD, g.scratch}};
    if (bias) {
      g.bias.set_data_handle(const_cast<void*>(bias));
      args.insert({DNNL_ARG_BIAS, g.bias});
    }
    g.p.execute(strm, args);
    strm.wait();
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
    impl_->run(impl_->get(bias ? FWD_BIAS : FWD, N, OC, C), inp, weight, bias, out);
  });
}

void CpuBf16Matmul::backward(uint16_t* dinp, float* dweight, float* dbias, const uint16_t* dout,
                             const uint16_t* inp, const uint16_t* weight, int N, int C, int OC,
                             bool accumulate_dinp) {
  BATON_ASSERT(N >= 0 && C > 0 && OC > 0, "matmul_backward: bad shape N={} C={} OC={}", N, C, OC);
  if (N == 0) return;
  guarded("matmul backward", [&] {
    if (dinp != nullptr)
      impl_->run(impl_->get(accumulate_dinp ? DINP_ACC : DINP, N, C, OC), dout, weight, nullptr, dinp);
    if (dweight != nullptr) impl_->run(impl_->get(DWEIGHT, OC, C, N), dout, inp, nullptr, dweight);
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
    for (int o = o0; o < o1; o++) dbias[o] += acc[o - o0];
  }
}

}  // namespace baton
