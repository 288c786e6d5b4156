// Dropout and the classifier's top-1 / top-5 hits for the CNN layers (backend.h: dropout,
// classification_hits). The dropout mask is src/core/dropout_mask.h's pure function of (seed, row,
// element), shared with the CPU backend, so both draw the same mask bit for bit.
// bf16 overloads: activations bf16, computed in fp32, rounded once when stored.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace baton::kernels {
using bf16 = __nv_bfloat16;

// y[r, j] = keep(seed, first_row + r, j) ? x[r, j] / (1 − p) : 0 over rows × row_elems; y may
// alias x.
void dropout(float* y, const float* x, int rows, int row_elems, float p, uint64_t seed, int64_t first_row,
             cudaStream_t s);
void dropout(bf16* y, const bf16* x, int rows, int row_elems, float p, uint64_t seed, int64_t first_row,
             cudaStream_t s);

// hits1[n] / hits5[n] = 1 when fewer than 1 / 5 of the V real classes of logits[n, :] (row stride
// ld) score strictly above the target's, else 0 (also for targets outside [0, V)). One thread per
// row.
void classification_hits(float* hits1, float* hits5, const float* logits, const int32_t* targets, int N, int V,
                         int ld, cudaStream_t s);
void classification_hits(float* hits1, float* hits5, const bf16* logits, const int32_t* targets, int N, int V,
                         int ld, cudaStream_t s);

}  // namespace baton::kernels
