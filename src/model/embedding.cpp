#include "model/embedding.h"

#include "model/gpt_dropout.h"

namespace baton {

void Embedding::add_params(ParamTable& table) {
  wte_ = table.add({.name = "wte", .shape = {d_.vocab_padded / tp_.size, d_.d_model},
                    .decay = true, .tp_dim = 0, .tied = "lm_head"});
  wpe_ = table.add({.name = "wpe", .shape = {d_.seq_len, d_.d_model}, .decay = true,
                    .init_std = 0.01f});
}

void Embedding::forward(const LayerCtx& ctx, const void*, void* saved) {
  const int N = ctx.B * ctx.T, C = d_.d_model, rows = d_.vocab_padded / tp_.size;
  // With sequence parallelism the full partial sum goes to scratch, then is reduce-scattered.
  void* full = tp_.sp() ? ctx.workspace : saved;
  ctx.be->embedding_forward(full, ctx.tokens, ctx.param(wte_), tp_.rank == 0 ? ctx.param(wpe_) : nullptr,
                            ctx.B, ctx.T, C, tp_.rank * rows, rows);
  void* out = tp_.exit(full, saved, N, C);
  if (out != saved) ctx.be->copy_act(saved, out, size_t(tp_.local_rows(N)) * C);
  if (ctx.training && d_.dropout > 0) gpt_dropout(ctx, tp_, saved, saved, C, d_.dropout, embedding_dropout_site());
}

// The output gradient, dropped as the forward's output was (into the workspace's tail).
const void* Embedding::dropped_gradient(const LayerCtx& ctx, const void* dout) const {
  if (!ctx.training || d_.dropout == 0) return dout;
  const size_t N = size_t(ctx.B) * ctx.T;
  void* g = static_cast<char*>(ctx.workspace) + N * d_.d_model * act_size_;
  gpt_dropout(ctx, tp_, g, dout, d_.d_model, d_.dropout, embedding_dropout_site());
  return g;
}

void Embedding::backward(const LayerCtx& ctx, const void*, const void* dout, void*, void*) {
  const int N = ctx.B * ctx.T, C = d_.d_model, rows = d_.vocab_padded / tp_.size;
  const void* dfull = tp_.exit_backward(dropped_gradient(ctx, dout), ctx.workspace, N, C);
  ctx.be->embedding_backward(ctx.grad(wte_), ctx.grad(wpe_), dfull, ctx.tokens, ctx.tokens_host, ctx.B,
                             ctx.T, C, tp_.rank * rows, rows);
}

void Embedding::backward_input(const LayerCtx& ctx, const void*, const void* dout, void*, void*,
                               void* deferred) {
  const int N = ctx.B * ctx.T, C = d_.d_model;
  const void* dfull = tp_.exit_backward(dropped_gradient(ctx, dout), deferred, N, C);
  if (dfull != deferred) ctx.be->copy_act(deferred, dfull, size_t(N) * C);
}

void Embedding::backward_weight(const LayerCtx& ctx, const void*, void*, void* deferred) {
  const int C = d_.d_model, rows = d_.vocab_padded / tp_.size;
  ctx.be->embedding_backward(ctx.grad(wte_), ctx.grad(wpe_), deferred, ctx.tokens, ctx.tokens_host, ctx.B,
                             ctx.T, C, tp_.rank * rows, rows);
}

}  // namespace baton
