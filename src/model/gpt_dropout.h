// GPT-2's hidden dropout (model.dropout): on the embedding output and on the attention and MLP
// branches before they join the residual stream (GPT-2's embd_pdrop and resid_pdrop; its
// attention-probability dropout, attn_pdrop, is not applied: baton's attention kernels keep no
// probabilities to drop). The mask is core/dropout_mask.h's pure function of (seed, token row,
// channel): token row = the global index of the token in the batch, (batch row)·T + t, and the
// seed mixes the run's seed, the batch and the site (layer and branch) — so every layout (tp, sp,
// pp, dp, micro-batch split, recomputation) draws the same masks, and the backward redraws the
// forward's instead of storing it.
#pragma once
#include <cstdint>

#include "core/rng.h"
#include "model/layer.h"
#include "model/tensor_parallel.h"

namespace baton {

// Dropout sites: the embedding, and two per transformer block.
inline uint64_t embedding_dropout_site() { return 0; }
inline uint64_t block_dropout_site(int block, int branch) { return 1 + 2 * uint64_t(block) + uint64_t(branch); }

// y = dropout(x) over this tensor-parallel rank's rows of the micro-batch's [B·T, C] hidden states
// (all of them, or its sequence-parallel slice); y may alias x. Applied to the forward's values
// and, with the same site, to their gradients.
inline void gpt_dropout(const LayerCtx& ctx, const TensorParallel& tp, void* y, const void* x, int C,
                        float p, uint64_t site) {
  const int N = ctx.B * ctx.T, rows = tp.local_rows(N);
  const int64_t first = int64_t(ctx.row0) * ctx.T + (tp.sp() ? int64_t(tp.rank) * rows : 0);
  ctx.be->dropout(y, x, rows, C, p, mix({ctx.batch_seed, 0x6770742d64726f70ull, site}), first);
}

}  // namespace baton
