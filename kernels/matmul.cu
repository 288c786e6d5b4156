// Dense layer on cuBLAS. The forward seeds `out` with the bias and lets the GEMM accumulate onto
// it (beta = 1), exactly as the CPU twin does, so the two round identically up to GEMM order.
#include "kernels/common.cuh"
#include "kernels/elementwise.cuh"
#include "kernels/gemm.cuh"
#include "kernels/matmul.cuh"
#include "kernels/reduce.cuh"

namespace baton::kernels {
namespace {

__global__ void broadcast_rows_kernel(float* out, const float* bias, int N, int OC) {
  const size_t total = size_t(N) * OC;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x)
    out[i] = bias[i % OC];
}

}  // namespace

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                    int C, int OC, cublasHandle_t h, cudaStream_t s) {
  BATON_KCHECK("matmul_forward", N >= 0 && C > 0 && OC > 0);
  if (N == 0) return;
  BATON_KCHECK("matmul_forward", out && inp && weight);
  float beta = 0.0f;
  if (bias != nullptr) {
    const size_t total = size_t(N) * OC;
    broadcast_rows_kernel<<<int(std::min<size_t>((total + 255) / 256, 65535u * 8)), 256, 0, s>>>(out, bias, N, OC);
    check_launch("matmul_forward");
    beta = 1.0f;
  }
  gemm_rm(h, false, true, N, OC, C, 1.0f, inp, C, weight, C, beta, out, OC);
}

size_t matmul_backward_scratch_floats(int N, int OC) { return column_sum_scratch_floats(N, OC); }

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC, bool accumulate_dinp,
                     bool accumulate_dweight, float* scratch, size_t scratch_floats, cublasHandle_t h,
                     cudaStream_t s) {
  BATON_KCHECK("matmul_backward", N >= 0 && C > 0 && OC > 0);
  if (N == 0) {  // empty sums: written parameter gradients are zeros (column_sum's rule for dbias)
    if (!accumulate_dweight && dweight != nullptr) zero(dweight, size_t(OC) * C, s);
    if (dbias != nullptr) column_sum(dbias, dout, N, OC, accumulate_dweight, scratch, scratch_floats, s);
    return;
  }
  BATON_KCHECK("matmul_backward", dout != nullptr);
  if (dinp != nullptr) {
    BATON_KCHECK("matmul_backward", weight != nullptr);
    gemm_rm(h, false, false, N, C, OC, 1.0f, dout, OC, weight, C, accumulate_dinp ? 1.0f : 0.0f,
            dinp, C);
  }
  if (dweight != nullptr) {
    BATON_KCHECK("matmul_backward", inp != nullptr);
    gemm_rm(h, true, false, OC, C, N, 1.0f, dout, OC, inp, C, accumulate_dweight ? 1.0f : 0.0f, dweight, C);
  }
  if (dbias != nullptr) column_sum(dbias, dout, N, OC, accumulate_dweight, scratch, scratch_floats, s);
}

}  // namespace baton::kernels
