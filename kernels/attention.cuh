// Causal self-attention core, fp32, materialising the probabilities att[B,NH,T,T] (the Backend
// contract saves them for the backward). qkv[B,T,3C]: per token q | k | v, head h at columns
// h*HS..(h+1)*HS of each; out[B,T,C]. The four (forward) / five (backward) products are cuBLAS
// strided-batched GEMMs over the heads of one batch row (the head stride is HS inside a row of
// stride 3C, so no permutation copy is needed); the masked softmax and its backward are kernels.
#pragma once
#include <cublas_v2.h>

#include <cstddef>

namespace baton::kernels {

void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH,
                       cublasHandle_t h, cudaStream_t s);

// Floats of scratch attention_backward needs: NH*T*T (dP/dS of one batch row at a time).
size_t attention_backward_scratch_floats(int T, int NH);
// dqkv[B,T,3C] overwritten.
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int B,
                        int T, int C, int NH, float* scratch, size_t scratch_floats,
                        cublasHandle_t h, cudaStream_t s);

}  // namespace baton::kernels
