// Row-major GEMMs through cuBLASLt with fused epilogues (the bf16 step, docs/cuda.md):
//
//   D[M,N] = epilogue(alpha op(A)[M,K] op(B)[K,N] + beta D)        op(X) = X^T when trans
//
// in the row-major convention of kernels/gemm.cuh (cuBLASLt is column-major: a row-major X[r, c]
// with leading dimension ld is the column-major X^T, so the call is made with A and B swapped and
// M, N exchanged). C is D (in place: beta accumulates onto D's previous contents).
//
// Types (ab_type / cd_type), compute CUBLAS_COMPUTE_32F, scale type fp32 (alpha, beta are floats):
//   bf16 / bf16, bf16 / fp32 (fp32 accumulation, e.g. dweight += with beta = 1), fp32 / fp32 (tests;
//   COMPUTE_32F never uses TF32 — only COMPUTE_32F_FAST_TF32 does).
//
// Epilogues (bias, aux have D's element type — cublasLt.h, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE and
// CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: "same type as the elements of the output matrix"):
//   Default      D = alpha AB + beta D
//   Bias         D = alpha AB + beta D + bias[j]                    bias[N]: one per output column
//   GeluAuxBias  aux = alpha AB + bias[j] (pre-activation),  D = gelu(aux)      (beta must be 0;
//                bias may be null: then cuBLASLt's GELU_AUX)
//   DGelu        D = gelu'(aux) * (alpha AB)                                   (beta must be 0)
// gelu is the tanh form 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))) (GPT-2; kernels/gelu.cuh).
//
// Fusion: the epilogue runs inside cuBLASLt when its documented constraints hold (aux leading
// dimension a multiple of 8 and >= N: cublasLt.h, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD), bias and
// aux are 16-byte aligned (not documented; conservative, as Marian's cuBLASLt wrapper) and the
// heuristic offers an algorithm for it (and cublasLtMatmul accepts it: a NOT_SUPPORTED or
// INVALID_VALUE refusal of a fused plan re-plans the key unfused). Otherwise the GEMM runs with the
// DEFAULT epilogue and a small elementwise kernel applies the epilogue (same math; bf16 results may
// differ by one extra rounding). set_fused_epilogues(false) forces the fallback (tests, debugging).
// Whether cuBLASLt's GELU is the tanh form is not stated in cublasLt.h; PyTorch's fallback for the
// same epilogue uses gelu(approximate="tanh"), llm.c relies on it, and GeluEpilogueForm in
// tests/gpu/test_gemm_lt.cpp measures it against both forms.
//
// Algorithms: cublasLtMatmulAlgoGetHeuristic once per key (shape, transposes, leading dimensions,
// types, epilogue, pointer alignments, bias/aux presence), cached with the matmul descriptor and
// layouts; one 32 MiB workspace allocated at construction (the only device allocation).
// Deterministic: a fixed algorithm per key and a user-owned workspace on one stream give the same
// bits every run (cuBLAS "Results reproducibility"). Not thread-safe (the cached descriptors carry
// the per-call bias/aux pointers): one LtGemm per stream.
#pragma once
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace baton::kernels {

enum class LtEpilogue : uint8_t { Default, Bias, GeluAuxBias, DGelu };

struct LtMatmulArgs {
  bool trans_a = false, trans_b = false;
  int M = 0, N = 0, K = 0;
  float alpha = 1.0f, beta = 0.0f;
  cudaDataType_t ab_type = CUDA_R_16BF;  // A and B: CUDA_R_16BF or CUDA_R_32F
  cudaDataType_t cd_type = CUDA_R_16BF;  // C = D, bias, aux: CUDA_R_16BF or CUDA_R_32F
  const void* A = nullptr;               // op(A)[M,K]: A is [M,K] (ld >= K) or, trans_a, [K,M] (ld >= M)
  int lda = 0;
  const void* B = nullptr;               // op(B)[K,N]: B is [K,N] (ld >= N) or, trans_b, [N,K] (ld >= K)
  int ldb = 0;
  void* D = nullptr;                     // [M,N], ld >= N
  int ldd = 0;
  LtEpilogue epilogue = LtEpilogue::Default;
  const void* bias = nullptr;            // [N] (Bias: required; GeluAuxBias: optional)
  void* aux = nullptr;                   // [M,N], ld >= N: GeluAuxBias writes it, DGelu reads it
  int ldaux = 0;
};

class LtGemm {
 public:
  static constexpr size_t kWorkspaceBytes = size_t(32) << 20;

  // Creates the cuBLASLt handle and the workspace (cudaMalloc) for work on `stream`.
  explicit LtGemm(cudaStream_t stream);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // Enqueues the GEMM (and a fallback epilogue kernel when not fused) on stream(). Preconditions
  // throw std::invalid_argument (BATON_KCHECK); cuBLASLt failures throw std::runtime_error with the
  // status name.
  void matmul(const LtMatmulArgs& args);

  cudaStream_t stream() const;
  // When false, every epilogue runs as DEFAULT GEMM + the elementwise kernel (default: true).
  void set_fused_epilogues(bool on);
  bool fused_epilogues() const;
  // cublasLtMatmulAlgoGetHeuristic calls so far (one per new key; two when a fused epilogue had no
  // algorithm and the DEFAULT one was asked for).
  size_t heuristic_queries() const;
  size_t cached_plans() const;
  // Calls whose epilogue ran in the fallback kernel; whether the last call's epilogue was fused
  // (true for a Default call).
  size_t fallback_calls() const;
  bool last_fused() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace baton::kernels
