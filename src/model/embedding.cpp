#include "model/embedding.h"

namespace baton {

void Embedding::add_params(ParamTable& table) {
  wte_ = table.add({.name = "wte", .shape = {d_.vocab_padded, d_.d_model}, .decay = true,
                    .tp_dim = 0, .tied = "lm_head"});
  wpe_ = table.add({.name = "wpe", .shape = {d_.seq_len, d_.d_model}, .decay = true,
                    .init_std = 0.01f});
}

void Embedding::forward(const LayerCtx& ctx, const float*, float* saved) {
  ctx.be->embedding_forward(saved, ctx.tokens, ctx.param(wte_), ctx.param(wpe_), ctx.B, ctx.T,
                            d_.d_model, 0, d_.vocab_padded);
}

void Embedding::backward(const LayerCtx& ctx, const float*, const float* dout, float*, float*) {
  ctx.be->embedding_backward(ctx.grad(wte_), ctx.grad(wpe_), dout, ctx.tokens, ctx.B, ctx.T,
                             d_.d_model, 0, d_.vocab_padded);
}

}  // namespace baton
