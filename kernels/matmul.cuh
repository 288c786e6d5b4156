// Dense layer: out[N,OC] = inp[N,C] . weight[OC,C]^T + bias[OC] and its backward, fp32 through
// cuBLAS (kernels/gemm.cuh) plus a bias broadcast and a deterministic bias-gradient reduction.
#pragma once
#include <cublas_v2.h>

#include <cstddef>

namespace baton::kernels {

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                    int C, int OC, cublasHandle_t h, cudaStream_t s);

// Floats of scratch matmul_backward needs (for dbias).
size_t matmul_backward_scratch_floats(int N, int OC);
// dinp (= or +=) dout . weight; dweight (+= or =, accumulate_dweight) dout^T . inp; dbias likewise
// the column sums of dout. Each of dinp, dweight, dbias may be null (skipped).
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC, bool accumulate_dinp,
                     bool accumulate_dweight, float* scratch, size_t scratch_floats, cublasHandle_t h, cudaStream_t s);

}  // namespace baton::kernels
