// LinearLayer; see linear_layer.h.
#include "model/linear_layer.h"

#include "core/rng.h"
#include "model/carver.h"

namespace baton {

void LinearLayer::add_params(ParamTable& t) {
  w_ = t.add({.name = s_.name + ".weight", .shape = {s_.out, s_.in}, .decay = true, .init_std = 0.01f});
  b_ = t.add({.name = s_.name + ".bias", .shape = {s_.out}, .init = ParamSpec::Init::ZEROS});
}

uint64_t LinearLayer::dropout_seed(const LayerCtx& ctx) const {
  return mix({ctx.batch_seed, static_cast<uint64_t>(s_.layer)});
}

const void* LinearLayer::flat_input(const LayerCtx& ctx, const void* in, void* scratch) const {
  if (!flatten_) return in;
  ctx.be->activations_to_nchw(scratch, in, ctx.B, s_.in / (s_.H * s_.W), s_.H, s_.W);
  return scratch;
}

void LinearLayer::forward(const LayerCtx& ctx, const void* in, void* saved) {
  Backend& be = *ctx.be;
  const size_t n = size_t(ctx.B) * s_.out;
  void* flat = act_at(ctx.workspace, n, act_size_);
  be.matmul_forward(saved, flat_input(ctx, in, flat), ctx.param(w_), ctx.param(b_), ctx.B, s_.in, s_.out);
  be.relu_forward(saved, saved, n);
  if (ctx.training && s_.dropout > 0)
    be.dropout(saved, saved, ctx.B, s_.out, s_.dropout, dropout_seed(ctx), ctx.row0);
}

void LinearLayer::backward(const LayerCtx& ctx, const void* in, const void* dout, void* din, void* saved) {
  Backend& be = *ctx.be;
  const size_t n = size_t(ctx.B) * s_.out;
  void* g = ctx.workspace;
  if (s_.dropout > 0)
    be.dropout(g, dout, ctx.B, s_.out, s_.dropout, dropout_seed(ctx), ctx.row0);
  be.relu_backward(g, saved, s_.dropout > 0 ? g : dout, n);
  void* flat = act_at(ctx.workspace, n, act_size_);
  void* dflat = act_at(flat, size_t(ctx.B) * s_.in, act_size_);
  const LayerCtx::ParamGrads pg = ctx.write_grads(w_, b_);
  be.matmul_backward(flatten_ ? dflat : din, pg.w, pg.b, g, flat_input(ctx, in, flat), ctx.param(w_), ctx.B,
                     s_.in, s_.out, false, pg.accumulate);
  if (flatten_ && din) be.nchw_to_activations(din, dflat, ctx.B, s_.in / (s_.H * s_.W), s_.H, s_.W);
}

}  // namespace baton
