// Row-major GEMM wrappers over column-major cuBLAS: a row-major X[r, c] with leading dimension ld
// is the column-major X^T, so C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T, i.e. cuBLAS is
// called with the operands swapped and M, N exchanged.
#include <string>

#include "kernels/common.cuh"
#include "kernels/gemm.cuh"

namespace baton::kernels {

void check_cublas(cublasStatus_t st, const char* op) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(op) + ": cuBLAS error: " + cublasGetStatusString(st));
}

void gemm_rm(cublasHandle_t h, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
             const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  BATON_KCHECK("gemm_rm", h != nullptr && M >= 0 && N >= 0 && K >= 0);
  if (M == 0 || N == 0) return;
  BATON_KCHECK("gemm_rm", C != nullptr && (K == 0 || (A != nullptr && B != nullptr)));
  BATON_KCHECK("gemm_rm", lda >= (trans_a ? M : K) && ldb >= (trans_b ? K : N) && ldc >= N);
  check_cublas(cublasGemmEx(h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                            N, M, K, &alpha, B, CUDA_R_32F, ldb, A, CUDA_R_32F, lda, &beta, C,
                            CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT),
               "gemm_rm");
}

void gemm_rm_strided_batched(cublasHandle_t h, bool trans_a, bool trans_b, int M, int N, int K,
                             float alpha, const float* A, int lda, long long stride_a,
                             const float* B, int ldb, long long stride_b, float beta, float* C,
                             int ldc, long long stride_c, int batch) {
  BATON_KCHECK("gemm_rm_strided_batched", h != nullptr && M >= 0 && N >= 0 && K >= 0 && batch >= 0);
  if (M == 0 || N == 0 || batch == 0) return;
  BATON_KCHECK("gemm_rm_strided_batched", C != nullptr && (K == 0 || (A != nullptr && B != nullptr)));
  BATON_KCHECK("gemm_rm_strided_batched",
               lda >= (trans_a ? M : K) && ldb >= (trans_b ? K : N) && ldc >= N);
  check_cublas(cublasGemmStridedBatchedEx(
                   h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, N, M,
                   K, &alpha, B, CUDA_R_32F, ldb, stride_b, A, CUDA_R_32F, lda, stride_a, &beta, C,
                   CUDA_R_32F, ldc, stride_c, batch, CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT),
               "gemm_rm_strided_batched");
}

}  // namespace baton::kernels
