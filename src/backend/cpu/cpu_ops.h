// CpuOps: the fp32 reference ops behind the CPU backend (cpu_backend.cpp adapts them to
// baton::Backend, in fp32 or emulated bf16; DESIGN §5). Every faster backend is tested against
// them, so they favour exactness and determinism over the last percent:
// - matmuls go through oneDNN's matmul (or OpenBLAS cblas_sgemm: cpu_gemm_engine), always called
//   from serial code, never from inside an OpenMP region (that would oversubscribe the cores);
//   neither splits the inner dimension, so the bits do not depend on the thread count;
// - everything else is OpenMP loops parallel over rows (or over column blocks for reductions down
//   columns), so a result never depends on thread scheduling: same inputs -> same bits;
// - reductions that feed gradient norms (sum_squares) run in double over fixed-size chunks.
// The op definitions live in one source file per concern: cpu_elementwise.cpp (elementwise,
// GELU, sum_squares), cpu_matmul.cpp, cpu_layernorm.cpp, cpu_attention.cpp, cpu_embedding.cpp,
// cpu_classifier.cpp, cpu_adamw.cpp, cpu_sgd.cpp.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "backend/backend.h"
#include "core/dtype.h"

namespace baton {

// The engine of the fp32 matmuls, from the environment's BATON_CPU_GEMM: "onednn" (unset or empty:
// the default) or "openblas" (the earlier engine: for comparisons, or where oneDNN has no kernel).
// Read at every call (cheap next to a product); the CPU backend reads it once at construction so
// a bad value is one error before the first step.
enum class CpuGemm { ONEDNN, OPENBLAS };
CpuGemm cpu_gemm_engine();
// C[M,N] = op(A)[M,K] . op(B)[K,N] + beta * C (row-major, beta 0 or 1) on the given engine, from
// serial code (the dense layers choose the engine per product; tests/bench/gemm_engines.cpp times both).
void cpu_gemm(CpuGemm engine, bool trans_a, bool trans_b, int M, int N, int K, const float* A, int lda,
              const float* B, int ldb, float beta, float* C, int ldc);
// Products this thread has run in oneDNN through cpu_gemm (what tests observe the engine choice by).
uint64_t cpu_gemm_onednn_calls();

// The ops have the meaning of the Backend op of the same name (backend.h), on fp32 host memory.
class CpuOps {
 public:
  void scale(float* x, float s, size_t n);
  void add(float* dst, const float* src, size_t n);
  double sum_squares(const float* x, size_t n);
  void dropout(float* y, const float* x, int rows, int row_elems, float p, uint64_t seed,
               int64_t first_row);

  void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                      int C, int OC);
  void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, int N, int C, int OC,
                       bool accumulate_dinp, bool accumulate_dweight);

  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                         const float* weight, const float* bias, int N, int C);
  void layernorm_backward(float* dinp, const float* dres, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, const float* mean,
                          const float* rstd, int N, int C);
  void residual_layernorm_forward(float* residual, float* out, float* mean, float* rstd,
                                  const float* a, const float* b, const float* weight,
                                  const float* bias, int N, int C);
  // The same on bf16 activations (and bf16 weight/bias): rows widened one at a time into per-thread
  // buffers, outputs rounded once — the emulation's bits (the fp32 op on widened values, rounded).
  void layernorm_forward(uint16_t* out, float* mean, float* rstd, const uint16_t* inp, const uint16_t* weight,
                         const uint16_t* bias, int N, int C);
  void layernorm_backward(uint16_t* dinp, const uint16_t* dres, float* dweight, float* dbias,
                          const uint16_t* dout, const uint16_t* inp, const uint16_t* weight, const float* mean,
                          const float* rstd, int N, int C);
  void residual_layernorm_forward(uint16_t* residual, uint16_t* out, float* mean, float* rstd, const uint16_t* a,
                                  const uint16_t* b, const uint16_t* weight, const uint16_t* bias, int N, int C);
  void residual_forward(float* out, const float* a, const float* b, size_t n);

  void gelu_forward(float* out, const float* inp, size_t n);
  void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n);

  void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C,
                         int NH);
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int B,
                          int T, int C, int NH);
  // bf16 activations (att stays fp32): the fp32 op's bits on the widened values, outputs rounded.
  void attention_forward(uint16_t* out, float* att, const uint16_t* qkv, int B, int T, int C, int NH);
  void attention_backward(uint16_t* dqkv, const uint16_t* dout, const uint16_t* qkv, const float* att, int B, int T,
                          int C, int NH);

  void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                         int B, int T, int C, int vocab_start, int vocab_rows);
  // bf16: out = wte row + wpe row summed in fp32 and rounded once (the emulation's bits).
  void embedding_forward(uint16_t* out, const int32_t* tokens, const uint16_t* wte, const uint16_t* wpe, int B,
                         int T, int C, int vocab_start, int vocab_rows);
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                          int T, int C, int vocab_start, int vocab_rows);

  void softmax_cross_entropy(float* losses, float* dlogits, const float* logits,
                             const int32_t* targets, int N, int V, int Vp, float dloss);
  void classification_hits(float* hits1, float* hits5, const float* logits, const int32_t* targets,
                           int N, int V, int ld);
  void logits_row_max(float* maxv, const float* logits, int N, int V_local, int Vl);
  void logits_sumexp_target(float* sumexp, float* target_logit, const float* logits,
                            const float* maxv, const int32_t* targets, int N, int V_local, int Vl,
                            int vocab_start);
  void cross_entropy_finish(float* losses, float* dlogits, const float* logits, const float* maxv,
                            const float* sumexp, const float* target_logit,
                            const int32_t* targets, int N, int V_local, int Vl, int vocab_start,
                            float dloss);

  void adamw_step(float* param, const float* grad, float* m, float* v, size_t n,
                  const AdamWArgs& args);
  void sgd_step(float* param, const float* grad, float* buf, size_t n, const SgdArgs& args);
};

namespace cpu_detail {
// Elementwise loops below this many elements run on one thread: forking the OpenMP team costs
// more than the work.
inline constexpr size_t kSerialBelow = 1 << 15;
// An activation element as fp32 and back: identity for fp32, the exact widening and the rounding
// of core/dtype.h for bf16 bits (the ops templated on the activation type read and write through
// these, so fp32 and bf16 share one loop).
inline float to_f32(float x) { return x; }
inline float to_f32(uint16_t x) { return bf16_to_f32(x); }
inline void store_f32(float* p, float v) { *p = v; }
inline void store_f32(uint16_t* p, float v) { *p = f32_to_bf16(v); }
// Column-block width for reductions down columns (dbias, layernorm dweight, embedding scatter):
// each block belongs to one thread, so sums are formed in row order whatever the thread count.
inline constexpr int kColBlock = 64;
// A dense layer's parameter gradients over no rows (an empty sum): written as zeros, or left as
// they are when the call adds to them (Backend::matmul_backward's accumulate_dweight).
inline void empty_param_grads(float* dweight, float* dbias, int C, int OC, bool accumulate) {
  if (accumulate) return;
  if (dweight != nullptr) std::fill(dweight, dweight + size_t(OC) * C, 0.0f);
  if (dbias != nullptr) std::fill(dbias, dbias + OC, 0.0f);
}

// Instruction set of the attention kernels (cpu_attention.cpp), the best this CPU has, detected at
// start-up. Tests force each supported one so all three code paths are checked on one machine.
enum class KernelIsa { BASE, AVX2, AVX512 };  // ordered: each implies the ones before
KernelIsa kernel_isa();
bool set_kernel_isa(KernelIsa isa);  // false (nothing changed) when this CPU lacks `isa`

// Whether this CPU executes bf16 dot products (avx512_bf16 or amx_bf16 among /proc/cpuinfo's
// flags), which CpuBf16::AUTO needs for the native bf16 path. Tests hide it to check the fallback.
bool cpu_has_bf16();
void hide_cpu_bf16(bool hide);  // true: cpu_has_bf16() says false; false: it detects again
}  // namespace cpu_detail

}  // namespace baton
