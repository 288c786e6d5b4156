// CPU twin of the flash-attention kernels (kernels/flash_attention.cuh): the same tiled algorithm
// (Dao 2023, FlashAttention-2, Algorithm 1 forward with the causal tile skipping of §3.1.1,
// Algorithm 2 backward of §3.1.2), in plain fp32 C++ with the kernels' loop structure, so it can be
// used to debug them tile by tile. It never materialises the T x T matrix: the forward keeps a
// running row max and row sum over key tiles (online softmax) and saves only the logsumexp per row;
// the backward recomputes P per tile from Q, K and that logsumexp.
//
// Arguments mean what they mean for the kernels:
//   qkv[B,T,3C]: per token q[C] | k[C] | v[C]; head h at columns h*HS..(h+1)*HS of each (HS =
//   C/NH). out[B,T,C]: heads concatenated. lse[B,NH,T]: log sum_{j<=t} exp(q_t . k_j / sqrt(HS)),
//   natural log, the scale included. dqkv[B,T,3C]: overwritten.
// Any HS is accepted (the kernels take flash_attention_supported(HS) only). Deterministic; OpenMP
// over the (b, h) pairs.
#pragma once

namespace baton {

// Tile sizes, the same as the kernels': query rows per tile (one CTA in the kernels) and keys per
// streamed K/V tile. Equal sizes make the causal tile test "key tile j <= query tile i".
inline constexpr int kFlashTileQ = 64;
inline constexpr int kFlashTileK = 64;

void cpu_flash_attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C,
                                 int NH);

// Reads only qkv, out, dout and lse (the forward's saved state is lse, O(T) per (b, h)).
void cpu_flash_attention_backward(float* dqkv, const float* dout, const float* out,
                                  const float* qkv, const float* lse, int B, int T, int C, int NH);

}  // namespace baton
