// ConvLayer; see conv_layer.h.
#include "model/conv_layer.h"

namespace baton {

struct ConvLayer::Saved {
  ConvUnit::Saved unit;
  void* pool_state = nullptr;
  void* out = nullptr;
};

ConvLayer::ConvLayer(std::string name, ConvUnitSpec unit, std::optional<PoolSpec> pool, bool first,
                     const Backend& be)
    : name_(std::move(name)), unit_(std::move(unit)), pool_(pool), first_(first), be_(be), act_size_(be.act_size()),
      // The images are the first conv's input as they are when they are fp32 in the backend's layout
      // (NCHW, or one channel, where NHWC is the same).
      convert_images_(first && (be.act_dtype() != DType::F32 ||
                                (be.image_layout() != Backend::ImageLayout::NCHW && unit_.spec().C > 1))) {}

Pool2d ConvLayer::pool(int N) const {
  return Pool2d{.N = N, .C = unit_.spec().K, .H = unit_.P(), .W = unit_.Q(), .R = pool_->R, .S = pool_->R,
                .stride = pool_->stride, .pad = pool_->pad, .max = true};
}

int ConvLayer::out_size() const { return pool_ ? pool(1).P() : unit_.P(); }

size_t ConvLayer::out_elems(int N) const {
  const int s = out_size();
  return size_t(N) * unit_.spec().K * s * s;
}

ConvLayer::Saved ConvLayer::views(Carver& c, int B) const {
  Saved v;
  v.unit = unit_.carve(c, B);
  v.out = v.unit.y;
  if (pool_) {
    v.pool_state = c.f32((be_.pool2d_workspace_bytes(pool(B)) + sizeof(float) - 1) / sizeof(float));
    v.out = c.act(out_elems(B));
  }
  return v;
}

size_t ConvLayer::saved_bytes(int B, int) const {
  return carved_bytes(act_size_, [&](Carver& c) { views(c, B); });
}

size_t ConvLayer::workspace_bytes(int B, int) const {
  size_t bytes = unit_.backward_scratch_bytes(B, act_size_);
  if (pool_) bytes += unit_.out_elems(B) * act_size_;
  if (convert_images_) bytes += unit_.in_elems(B) * act_size_;
  return bytes;
}

void* ConvLayer::output(void* saved, int B, int) const {
  Carver c{saved, act_size_};
  return views(c, B).out;
}

const void* ConvLayer::input(const LayerCtx& ctx, const void* in, void* scratch) const {
  if (!first_) return in;
  if (!convert_images_) return ctx.images;
  const ConvUnitSpec& u = unit_.spec();
  ctx.be->images_to_activations(scratch, ctx.images, ctx.B, u.C, u.H, u.W);
  return scratch;
}

void ConvLayer::forward(const LayerCtx& ctx, const void* in, void* saved) {
  Carver c{saved, act_size_};
  const Saved v = views(c, ctx.B);
  unit_.forward(ctx, input(ctx, in, ctx.workspace), v.unit, ctx.B);
  if (pool_) ctx.be->pool2d_forward(v.out, v.pool_state, v.unit.y, pool(ctx.B));
}

void ConvLayer::backward(const LayerCtx& ctx, const void* in, const void* dout, void* din, void* saved) {
  Carver c{saved, act_size_};
  const Saved v = views(c, ctx.B);
  Carver w{ctx.workspace, act_size_};
  void* x_cast = convert_images_ ? w.act(unit_.in_elems(ctx.B)) : nullptr;
  void* scratch = w.act(2 * unit_.out_elems(ctx.B));
  const void* dy = dout;
  if (pool_) {
    void* dpool = w.act(unit_.out_elems(ctx.B));
    ctx.be->pool2d_backward(dpool, dout, v.pool_state, pool(ctx.B));
    dy = dpool;
  }
  unit_.backward(ctx, input(ctx, in, x_cast), dy, first_ ? nullptr : din, v.unit, ctx.B, scratch);
}

}  // namespace baton
