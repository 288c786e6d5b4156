// Classifier: fused softmax + cross-entropy over logits[N,Vp] (first V columns real), and the
// three passes of the vocab-parallel (Megatron) form. One block per row; dlogits may alias logits
// (each element is read by the thread that writes it, after the row statistics are complete).
//
// bf16 overloads: logits and dlogits bf16 (dlogits may still alias logits); losses, maxv, sumexp
// and target_logit fp32; every value computed in fp32 and rounded once when stored. One block per
// row over groups of 8 columns (16-byte accesses when the row length Vp / Vl is a multiple of 8
// and logits, dlogits are 16-byte aligned; else element-wise in the same order). The fused
// softmax_cross_entropy streams the row once for the online max/sum (running max, rescaled sum
// per thread, then a fixed-tree block max and sum) and once for the gradient.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace baton::kernels {

// losses[N]; dlogits (nullable) = (softmax - onehot) * dloss on [0,V), 0 on [V,Vp).
// Targets < 0: loss 0, gradient 0. A target >= V yields a NaN loss (the CPU twin throws).
void softmax_cross_entropy(float* losses, float* dlogits, const float* logits,
                           const int32_t* targets, int N, int V, int Vp, float dloss,
                           cudaStream_t s);
void logits_row_max(float* maxv, const float* logits, int N, int V_local, int Vl, cudaStream_t s);
void logits_sumexp_target(float* sumexp, float* target_logit, const float* logits,
                          const float* maxv, const int32_t* targets, int N, int V_local, int Vl,
                          int vocab_start, cudaStream_t s);
void cross_entropy_finish(float* losses, float* dlogits, const float* logits, const float* maxv,
                          const float* sumexp, const float* target_logit, const int32_t* targets,
                          int N, int V_local, int Vl, int vocab_start, float dloss,
                          cudaStream_t s);

using bf16 = __nv_bfloat16;
void softmax_cross_entropy(float* losses, bf16* dlogits, const bf16* logits, const int32_t* targets,
                           int N, int V, int Vp, float dloss, cudaStream_t s);
void logits_row_max(float* maxv, const bf16* logits, int N, int V_local, int Vl, cudaStream_t s);
void logits_sumexp_target(float* sumexp, float* target_logit, const bf16* logits,
                          const float* maxv, const int32_t* targets, int N, int V_local, int Vl,
                          int vocab_start, cudaStream_t s);
void cross_entropy_finish(float* losses, bf16* dlogits, const bf16* logits, const float* maxv,
                          const float* sumexp, const float* target_logit, const int32_t* targets,
                          int N, int V_local, int Vl, int vocab_start, float dloss,
                          cudaStream_t s);

}  // namespace baton::kernels
