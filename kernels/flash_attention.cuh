// Causal flash attention, forward and backward (Dao 2023, FlashAttention-2: Algorithm 1 forward
// §3.1.1 with its causal tile skipping, Algorithm 2 backward §3.1.2, parallelism over query tiles
// (forward) and key tiles (backward) of §3.2, Q split across warps of §3.3). The T x T score
// matrix is never materialised: the forward streams K/V tiles through shared memory with an online
// softmax in fp32 and saves only the logsumexp per row; the backward recomputes P per tile from Q,
// K and that logsumexp. Deterministic dQ without §3.2's atomic adds: the fp32 kernels give dQ a
// second pass that owns the query tiles; the bf16 kernels keep Algorithm 2's single pass (5 GEMMs
// per tile pair) and write each key tile's dQ contribution to its own fp32 scratch slot, summed in
// a fixed order by a small kernel (flash_attention.cu, dq_partial_floats).
//
// Layouts: qkv[B,T,3C] per token q[C] | k[C] | v[C], head h at columns h*HS..(h+1)*HS of each
// (HS = C/NH); out[B,T,C] heads concatenated; lse[B,NH,T] fp32 = log sum_{j<=t}
// exp(q_t.k_j/sqrt(HS)) (natural log, the scale included); dqkv[B,T,3C] overwritten.
//
// Two precisions with the same tiling (64 query rows per CTA, 64-key K/V tiles):
//   fp32: SIMT fp32 FMA, no tensor cores: the exactness test of the algorithm (CPU twin:
//         src/backend/cpu/cpu_flash_attention.h, same loop structure).
//   bf16: bf16 operands on the tensor cores (mma.sync m16n8k16, fp32 accumulators, sm_80+),
//         fragments loaded with ldmatrix, tiles copied with cp.async (double-buffered); softmax
//         statistics, lse, D and the dQ partial sums in fp32. bf16 pointers and the backward's
//         scratch must be 16-byte aligned.
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

// Floats of scratch the backward needs (either precision): D = rowsum(dO o O), B*NH*T floats
// rounded up to a multiple of 4, then the bf16 kernels' dQ partial sums, one fp32 [64, HS] slot
// per (query tile, key tile) pair at or below the diagonal: B*NH * nt(nt+1)/2 * 64*HS floats with
// nt = ceil(T / 64), i.e. (nt + 1) / 2 times an fp32 dQ (the fp32 kernels use only D).
size_t flash_attention_backward_scratch_floats(int B, int T, int C, int NH);

// dqkv[B,T,3C] overwritten. Three launches each. fp32: D = rowsum(dO o O); dK/dV (one CTA per key
// tile, iterating the query tiles at or below the diagonal); dQ (one CTA per query tile, iterating
// the key tiles at or left of the diagonal). bf16: D; dK, dV and the dQ partial sums (one CTA per
// key tile, iterating the query tiles at or below the diagonal); the dQ reduction.
void flash_attention_backward(float* dqkv, const float* dout, const float* out, const float* qkv,
                              const float* lse, int B, int T, int C, int NH, float* scratch,
                              size_t scratch_floats, cudaStream_t s);
void flash_attention_backward(__nv_bfloat16* dqkv, const __nv_bfloat16* dout,
                              const __nv_bfloat16* out, const __nv_bfloat16* qkv, const float* lse,
                              int B, int T, int C, int NH, float* scratch, size_t scratch_floats,
                              cudaStream_t s);

}  // namespace baton::kernels
