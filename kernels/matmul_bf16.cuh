// Dense layer in bf16 on cuBLASLt (kernels/gemm_lt.cuh): bf16 activations and weights, fp32
// accumulation, fp32 parameter gradients.
//   forward:  out[N,OC] = inp[N,C] . weight[OC,C]^T + bias[OC], optionally followed by GELU (the fc
//             layer of GPT-2): out keeps the pre-activation, gelu_out = gelu_tanh(out).
//   backward: dinp (= or +=) dout . weight [. gelu'(dgelu_pre)], dweight += dout^T . inp (fp32),
//             dbias += column sums of dout (fp32, deterministic).
// Every launch goes on `s`, which must be lt.stream() (the LtGemm's workspace belongs to it).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>

namespace baton::kernels {

class LtGemm;

// out[N,OC] = inp[N,C] . weight[OC,C]^T + bias[OC] (bias nullable). If gelu_out != null: out
// receives the pre-activation (x + bias) and gelu_out[N,OC] = gelu_tanh(out) (one cuBLASLt call
// with GELU_AUX_BIAS when OC % 8 == 0 and the pointers are 16-byte aligned; otherwise GEMM + an
// elementwise kernel). out and gelu_out must not overlap.
void matmul_forward_bf16(LtGemm& lt, __nv_bfloat16* out, const __nv_bfloat16* inp, const __nv_bfloat16* weight,
                         const __nv_bfloat16* bias, int N, int C, int OC, __nv_bfloat16* gelu_out, cudaStream_t s);

// Floats of scratch matmul_backward_bf16 needs (the dbias column reduction's partial sums).
size_t matmul_backward_bf16_scratch_floats(int N, int OC);

// dinp[N,C] (= or +=, bf16) dout . weight; if dgelu_pre != null the product is first multiplied
// elementwise by gelu'(dgelu_pre[N,C]) (the backward of a GELU that followed the previous matmul:
// DGELU epilogue when C % 8 == 0; not allowed together with accumulate_dinp; dinp must not be
// dgelu_pre). dweight[OC,C] (+= or =, accumulate_dweight) dout^T . inp (fp32; beta = 1 or 0: the
// GEMM accumulates into fp32 D or overwrites it). dbias[OC] likewise the column sums of dout in fp32
// (fixed row chunks, fixed order, no atomics).
// Each of dinp, dweight, dbias may be null (skipped); the others are computed as in the full call.
void matmul_backward_bf16(LtGemm& lt, __nv_bfloat16* dinp, float* dweight, float* dbias, const __nv_bfloat16* dout,
                          const __nv_bfloat16* inp, const __nv_bfloat16* weight, int N, int C, int OC,
                          bool accumulate_dinp, bool accumulate_dweight, const __nv_bfloat16* dgelu_pre,
                          float* scratch, size_t scratch_floats, cudaStream_t s);

}  // namespace baton::kernels
