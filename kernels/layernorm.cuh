// LayerNorm over the last dimension (eps = 1e-5, biased variance), the fused residual add, and
// the backward. Row statistics mean[N], rstd[N] are saved by the forward for the backward.
//
// bf16 overloads: inp/out/residual/dout/dinp and the weight/bias compute copies are bf16; mean,
// rstd, dweight and dbias are fp32. Every value is computed in fp32 and rounded once when stored;
// dinp = dres + ... loads dres (bf16), adds in fp32, rounds once. One warp per row (any C; rows of C <= 2048 are
// held in registers, longer rows are streamed again from L1/L2 for each pass); 16-byte accesses
// when C % 8 == 0 and every row pointer is 16-byte aligned, else an element-wise kernel that sums
// in the same order (same bits).
// Backward: one kernel reads each row of dout and inp once and writes dinp and the per-block
// (fixed row chunks) fp32 partials of dweight and dbias, a second small one adds the partials in
// block order (no atomics: deterministic); the partials take layernorm_backward_scratch_floats(N, C).
// The per-warp column sums live in shared memory: 8 * C bytes per warp (fp32 input; bf16: C rounded
// up to 8), so C is limited by the device's opt-in shared memory per block (C <= ~29000 on an
// H100, ~20000 on an A100; beyond, a failed precondition or the opt-in's CUDA error says so).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>

namespace baton::kernels {

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, cudaStream_t s);
// residual = a + b; out = layernorm(residual).
void residual_layernorm_forward(float* residual, float* out, float* mean, float* rstd,
                                const float* a, const float* b, const float* weight,
                                const float* bias, int N, int C, cudaStream_t s);

// Floats of scratch layernorm_backward needs for the parameter gradients of [N, C].
size_t layernorm_backward_scratch_floats(int N, int C);
// dinp[N,C] = dres + the input gradient (dres == dinp: in place; null: 0 + the gradient; no other
// overlap); dweight[C] += sum_n dout*xhat; dbias[C] += sum_n dout. Each of the three outputs may
// be null (skipped). Deterministic (fixed row chunks, no atomics).
void layernorm_backward(float* dinp, const float* dres, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int N, int C, float* scratch, size_t scratch_floats,
                        cudaStream_t s);

using bf16 = __nv_bfloat16;
void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* weight,
                       const bf16* bias, int N, int C, cudaStream_t s);
// residual = bf16(a + b); out = layernorm(residual) computed from the rounded residual values.
// residual may alias a or b.
void residual_layernorm_forward(bf16* residual, bf16* out, float* mean, float* rstd, const bf16* a,
                                const bf16* b, const bf16* weight, const bf16* bias, int N, int C,
                                cudaStream_t s);
// dinp (bf16) = dres (bf16) + ...; dweight, dbias (fp32) += ...; each output nullable, as the fp32 overload.
void layernorm_backward(bf16* dinp, const bf16* dres, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                        const bf16* weight, const float* mean, const float* rstd, int N, int C,
                        float* scratch, size_t scratch_floats, cudaStream_t s);

}  // namespace baton::kernels
