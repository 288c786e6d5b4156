#include "model/transformer_block.h"

#include <cmath>

#include <fmt/format.h>

namespace baton {

struct TransformerBlock::Saved {
  float *ln1, *mean1, *rstd1, *qkv, *atty, *att, *x2, *ln2, *mean2, *rstd2, *fch, *fch_gelu, *out;
};

std::string TransformerBlock::name() const { return fmt::format("h.{}", index_); }

void TransformerBlock::add_params(ParamTable& t) {
  const int64_t C = d_.d_model;
  const std::string p = name();
  // GPT-2: residual projections start at std 0.02/sqrt(2L) so the residual stream's variance does
  // not grow with depth.
  const float proj_std = 0.02f / std::sqrt(2.0f * d_.n_layer);
  using I = ParamSpec::Init;
  ln1_w_ = t.add({.name = p + ".ln1.weight", .shape = {C}, .init = I::ONES});
  ln1_b_ = t.add({.name = p + ".ln1.bias", .shape = {C}, .init = I::ZEROS});
  qkv_w_ = t.add({.name = p + ".attn.qkv.weight", .shape = {3 * C, C}, .decay = true, .tp_dim = 0});
  qkv_b_ = t.add({.name = p + ".attn.qkv.bias", .shape = {3 * C}, .tp_dim = 0, .init = I::ZEROS});
  proj_w_ = t.add({.name = p + ".attn.proj.weight", .shape = {C, C}, .decay = true, .tp_dim = 1,
                   .init_std = proj_std});
  proj_b_ = t.add({.name = p + ".attn.proj.bias", .shape = {C}, .init = I::ZEROS});
  ln2_w_ = t.add({.name = p + ".ln2.weight", .shape = {C}, .init = I::ONES});
  ln2_b_ = t.add({.name = p + ".ln2.bias", .shape = {C}, .init = I::ZEROS});
  fc_w_ = t.add({.name = p + ".mlp.fc.weight", .shape = {4 * C, C}, .decay = true, .tp_dim = 0});
  fc_b_ = t.add({.name = p + ".mlp.fc.bias", .shape = {4 * C}, .tp_dim = 0, .init = I::ZEROS});
  fcproj_w_ = t.add({.name = p + ".mlp.proj.weight", .shape = {C, 4 * C}, .decay = true,
                     .tp_dim = 1, .init_std = proj_std});
  fcproj_b_ = t.add({.name = p + ".mlp.proj.bias", .shape = {C}, .init = I::ZEROS});
}

TransformerBlock::Saved TransformerBlock::views(float* s, int B, int T) const {
  const size_t N = size_t(B) * T, C = d_.d_model, NH = d_.n_head;
  Saved v{};
  auto take = [&s](size_t n) { float* p = s; s += n; return p; };
  v.ln1 = take(N * C);
  v.mean1 = take(N);
  v.rstd1 = take(N);
  v.qkv = take(N * 3 * C);
  v.atty = take(N * C);
  v.att = take(size_t(B) * NH * T * T);
  v.x2 = take(N * C);
  v.ln2 = take(N * C);
  v.mean2 = take(N);
  v.rstd2 = take(N);
  v.fch = take(N * 4 * C);
  v.fch_gelu = take(N * 4 * C);
  v.out = take(N * C);
  return v;
}

size_t TransformerBlock::saved_floats(int B, int T) const {
  const size_t N = size_t(B) * T, C = d_.d_model, NH = d_.n_head;
  return N * C * 5 + N * 4 + N * 3 * C + size_t(B) * NH * T * T + N * 8 * C;
}

// Backward needs: dres[N,C], d_ln[N,C], dqkv[N,3C] or dfch[N,4C] + dfch_gelu[N,4C] (not at once).
size_t TransformerBlock::workspace_floats(int B, int T) const {
  const size_t N = size_t(B) * T, C = d_.d_model;
  return N * C * 2 + N * 8 * C;
}

float* TransformerBlock::output(float* saved, int B, int T) const { return views(saved, B, T).out; }

void TransformerBlock::forward(const LayerCtx& ctx, const float* x, float* saved) {
  Backend& be = *ctx.be;
  const int N = ctx.B * ctx.T, C = d_.d_model;
  Saved s = views(saved, ctx.B, ctx.T);
  float* tmp = ctx.workspace;  // [N,C] projection outputs before the residual add
  be.layernorm_forward(s.ln1, s.mean1, s.rstd1, x, ctx.param(ln1_w_), ctx.param(ln1_b_), N, C);
  be.matmul_forward(s.qkv, s.ln1, ctx.param(qkv_w_), ctx.param(qkv_b_), N, C, 3 * C);
  be.attention_forward(s.atty, s.att, s.qkv, ctx.B, ctx.T, C, d_.n_head);
  be.matmul_forward(tmp, s.atty, ctx.param(proj_w_), ctx.param(proj_b_), N, C, C);
  be.residual_layernorm_forward(s.x2, s.ln2, s.mean2, s.rstd2, x, tmp, ctx.param(ln2_w_),
                                ctx.param(ln2_b_), N, C);
  be.matmul_forward(s.fch, s.ln2, ctx.param(fc_w_), ctx.param(fc_b_), N, C, 4 * C);
  be.gelu_forward(s.fch_gelu, s.fch, size_t(N) * 4 * C);
  be.matmul_forward(tmp, s.fch_gelu, ctx.param(fcproj_w_), ctx.param(fcproj_b_), N, 4 * C, C);
  be.residual_forward(s.out, s.x2, tmp, size_t(N) * C);
}

void TransformerBlock::backward(const LayerCtx& ctx, const float* x, const float* dout, float* dx,
                                float* saved) {
  Backend& be = *ctx.be;
  const int N = ctx.B * ctx.T, C = d_.d_model;
  const size_t NC = size_t(N) * C;
  Saved s = views(saved, ctx.B, ctx.T);
  float* dx2 = ctx.workspace;       // [N,C] gradient of the mid-block residual stream
  float* dln = dx2 + NC;            // [N,C] gradient of a layernorm output
  float* big = dln + NC;            // [N,8C]: dfch_gelu | dfch, later dqkv
  float* dfch_gelu = big;
  float* dfch = big + 4 * NC;
  // MLP: out = x2 + fcproj(gelu(fc(ln2(x2))))
  be.matmul_backward(dfch_gelu, ctx.grad(fcproj_w_), ctx.grad(fcproj_b_), dout, s.fch_gelu,
                     ctx.param(fcproj_w_), N, 4 * C, C, false);
  be.gelu_backward(dfch, s.fch, dfch_gelu, 4 * NC);
  be.matmul_backward(dln, ctx.grad(fc_w_), ctx.grad(fc_b_), dfch, s.ln2, ctx.param(fc_w_), N, C,
                     4 * C, false);
  be.copy(dx2, dout, NC);
  be.layernorm_backward(dx2, ctx.grad(ln2_w_), ctx.grad(ln2_b_), dln, s.x2, ctx.param(ln2_w_),
                        s.mean2, s.rstd2, N, C);
  // Attention: x2 = x + proj(attention(qkv(ln1(x))))
  float* datty = dln;
  float* dqkv = big;
  be.matmul_backward(datty, ctx.grad(proj_w_), ctx.grad(proj_b_), dx2, s.atty, ctx.param(proj_w_),
                     N, C, C, false);
  be.attention_backward(dqkv, datty, s.qkv, s.att, ctx.B, ctx.T, C, d_.n_head);
  be.matmul_backward(dln, ctx.grad(qkv_w_), ctx.grad(qkv_b_), dqkv, s.ln1, ctx.param(qkv_w_), N, C,
                     3 * C, false);
  be.copy(dx, dx2, NC);
  be.layernorm_backward(dx, ctx.grad(ln1_w_), ctx.grad(ln1_b_), dln, x, ctx.param(ln1_w_), s.mean1,
                        s.rstd1, N, C);
}

}  // namespace baton
