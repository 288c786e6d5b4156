// Causal flash attention, forward and backward (Dao 2023, FlashAttention-2: Algorithm 1 forward
// §3.1.1 with its causal tile skipping, Algorithm 2 backward §3.1.2, parallelism over query tiles
// (forward) and key tiles (backward) of §3.2, Q split across warps of §3.3; dQ by a second pass
// that owns the query tiles instead of §3.2's atomic adds, so the result is deterministic). The
// T x T score matrix is never materialised: the forward streams K/V tiles through shared memory
// with an online softmax in fp32 and saves only the logsumexp per row; the backward recomputes P
// per tile from Q, K and that logsumexp.
//
// Layouts: qkv[B,T,3C] per token q[C] | k[C] | v[C], head h at columns h*HS..(h+1)*HS of each
// (HS = C/NH); out[B,T,C] heads concatenated; lse[B,NH,T] fp32 = log sum_{j<=t}
// exp(q_t.k_j/sqrt(HS)) (natural log, the scale included); dqkv[B,T,3C] overwritten.
//
// Two precisions with the same tiling (64 query rows per CTA, 64-key K/V tiles):
//   fp32: SIMT fp32 FMA, no tensor cores: the exactness test of the algorithm (CPU twin:
//         src/backend/cpu/cpu_flash_attention.h, same loop structure).
//   bf16: bf16 operands on the tensor cores (mma.sync m16n8k16, fp32 accumulators, sm_80+),
//         softmax statistics, lse and D in fp32. bf16 pointers must be 16-byte aligned.
// Deterministic: no atomics; every output tile has one owner CTA summing in a fixed order.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

namespace baton::kernels {

// Query rows per CTA (forward, dQ pass) and keys per K/V tile (forward, dK/dV pass).
inline constexpr int kFlashTileRows = 64;
inline constexpr int kFlashTileKeys = 64;

// The head sizes the kernels handle: 32, 64 and 128.
bool flash_attention_supported(int HS);

void flash_attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH,
                             cudaStream_t s);
void flash_attention_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B, int T,
                             int C, int NH, cudaStream_t s);

// Floats of scratch the backward needs: D = rowsum(dO o O), B*NH*T (dQ has its own pass that owns
// the query tiles, so it needs no accumulation buffer).
size_t flash_attention_backward_scratch_floats(int B, int T, int NH);

// dqkv[B,T,3C] overwritten. Three launches: D = rowsum(dO o O); dK/dV (one CTA per key tile,
// iterating the query tiles at or below the diagonal); dQ (one CTA per query tile, iterating the
// key tiles at or left of the diagonal).
void flash_attention_backward(float* dqkv, const float* dout, const float* out, const float* qkv,
                              const float* lse, int B, int T, int C, int NH, float* scratch,
                              size_t scratch_floats, cudaStream_t s);
void flash_attention_backward(__nv_bfloat16* dqkv, const __nv_bfloat16* dout,
                              const __nv_bfloat16* out, const __nv_bfloat16* qkv, const float* lse,
                              int B, int T, int C, int NH, float* scratch, size_t scratch_floats,
                              cudaStream_t s);

}  // namespace baton::kernels
