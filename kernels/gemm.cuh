// Row-major fp32 GEMMs through cuBLAS: C[M,N] = alpha op(A)[M,K] op(B)[K,N] + beta C, with
// op(X) = X^T when trans. Strided-batched form for attention. fp32 compute, pedantic (no TF32,
// no reduced-precision paths): results agree with the CPU's sgemm to summation-order rounding.
// The handle must already be bound (cublasSetStream) to the stream the caller's other kernels use.
#pragma once
#include <cublas_v2.h>

#include <cstddef>

namespace baton::kernels {

void check_cublas(cublasStatus_t st, const char* op);

void gemm_rm(cublasHandle_t h, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
             const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc);

void gemm_rm_strided_batched(cublasHandle_t h, bool trans_a, bool trans_b, int M, int N, int K,
                             float alpha, const float* A, int lda, long long stride_a,
                             const float* B, int ldb, long long stride_b, float beta, float* C,
                             int ldc, long long stride_c, int batch);

}  // namespace baton::kernels
