// ResidualBlock; see residual_block.h.
#include "model/residual_block.h"

#include <algorithm>

#include "core/error.h"

namespace baton {

struct ResidualBlock::Saved {
  std::vector<ConvUnit::Saved> units;
  ConvUnit::Saved down;
  void* out = nullptr;
};

// Forward: the shortcut's output. Backward: the gradient after the output ReLU, two ping-pong
// input gradients, a unit's scratch, the shortcut's input gradient.
struct ResidualBlock::Scratch {
  void* down_y;
  void *g, *d[2], *unit, *dshort;
};

ResidualBlock::ResidualBlock(const ResidualBlockSpec& s, size_t act_size) : spec_(s), act_size_(act_size) {
  auto unit = [&](int i, int C, int H, int K, int R, int stride, bool relu) {
    return ConvUnit({.conv = fmt::format("{}.conv{}", s.name, i), .bn = fmt::format("{}.bn{}", s.name, i),
                     .C = C, .H = H, .W = H, .K = K, .R = R, .stride = stride, .pad = R / 2, .relu = relu});
  };
  BATON_ASSERT(s.H == s.W, "square inputs only ({}x{})", s.H, s.W);
  if (s.bottleneck) {
    units_.push_back(unit(1, s.C, s.H, s.planes, 1, 1, true));
    units_.push_back(unit(2, s.planes, s.H, s.planes, 3, s.stride, true));
    units_.push_back(unit(3, s.planes, units_.back().P(), 4 * s.planes, 1, 1, false));
  } else {
    units_.push_back(unit(1, s.C, s.H, s.planes, 3, s.stride, true));
    units_.push_back(unit(2, s.planes, units_.back().P(), s.planes, 3, 1, false));
  }
  if (s.stride != 1 || s.C != s.out_channels())
    down_.push_back(ConvUnit({.conv = s.name + ".downsample.0", .bn = s.name + ".downsample.1", .C = s.C,
                              .H = s.H, .W = s.W, .K = s.out_channels(), .R = 1, .stride = s.stride, .pad = 0,
                              .relu = false}));
}

void ResidualBlock::add_params(ParamTable& t) {
  for (ConvUnit& u : units_) u.add_params(t);
  for (ConvUnit& u : down_) u.add_params(t);
}

double ResidualBlock::flops_per_sample() const {
  double f = 0;
  for (const ConvUnit& u : units_) f += u.flops_per_sample();
  for (const ConvUnit& u : down_) f += u.flops_per_sample();
  return f;
}

ResidualBlock::Scratch ResidualBlock::scratch(Carver& c, int B) const {
  size_t widest = 0;
  for (const ConvUnit& u : units_) widest = std::max({widest, u.out_elems(B), u.in_elems(B)});
  Scratch s{};
  s.down_y = c.act(out_elems(B));
  s.g = c.act(out_elems(B));
  s.d[0] = c.act(widest);
  s.d[1] = c.act(widest);
  s.unit = c.act(2 * widest);
  s.dshort = c.act(units_.front().in_elems(B));
  return s;
}

size_t ResidualBlock::workspace_bytes(int B, int) const {
  return carved_bytes(act_size_, [&](Carver& c) { scratch(c, B); });
}

ResidualBlock::Saved ResidualBlock::views(Carver& c, int B, const Scratch* fwd) const {
  Saved v;
  // The last unit's output is the block's (its op adds the shortcut and applies the ReLU).
  for (size_t i = 0; i < units_.size(); ++i) v.units.push_back(units_[i].carve(c, B, i + 1 < units_.size()));
  if (!down_.empty()) {
    v.down = down_[0].carve(c, B, false);
    if (fwd) down_[0].output_to(v.down, fwd->down_y);
  }
  v.out = c.act(out_elems(B));
  units_.back().output_to(v.units.back(), v.out);
  return v;
}

size_t ResidualBlock::saved_bytes(int B, int) const {
  return carved_bytes(act_size_, [&](Carver& c) { views(c, B, nullptr); });
}

void* ResidualBlock::output(void* saved, int B, int) const {
  Carver c{saved, act_size_};
  return views(c, B, nullptr).out;
}

void ResidualBlock::forward(const LayerCtx& ctx, const void* in, void* saved) {
  Carver w{ctx.workspace, act_size_};
  const Scratch s = scratch(w, ctx.B);
  Carver c{saved, act_size_};
  const Saved v = views(c, ctx.B, &s);
  const void* shortcut = in;
  if (!down_.empty()) {
    down_[0].forward(ctx, in, v.down, ctx.B);
    shortcut = v.down.y;
  }
  const void* x = in;
  for (size_t i = 0; i < units_.size(); ++i) {
    units_[i].forward(ctx, x, v.units[i], ctx.B, i + 1 == units_.size() ? shortcut : nullptr);
    x = v.units[i].y;
  }
}

void ResidualBlock::backward(const LayerCtx& ctx, const void* in, const void* dout, void* din, void* saved) {
  Backend& be = *ctx.be;
  Carver w{ctx.workspace, act_size_};
  const Scratch s = scratch(w, ctx.B);
  Carver c{saved, act_size_};
  const Saved v = views(c, ctx.B, &s);
  be.relu_backward(s.g, v.out, dout, out_elems(ctx.B));
  const void* g = s.g;
  for (size_t i = units_.size(); i-- > 0;) {
    void* dx = i == 0 ? din : s.d[i % 2];
    units_[i].backward(ctx, i == 0 ? in : v.units[i - 1].y, g, dx, v.units[i], ctx.B, s.unit);
    g = dx;
  }
  const size_t n_in = units_.front().in_elems(ctx.B);
  if (down_.empty()) {
    be.residual_forward(din, din, s.g, n_in);
    return;
  }
  down_[0].backward(ctx, in, s.g, s.dshort, v.down, ctx.B, s.unit);
  be.residual_forward(din, din, s.dshort, n_in);
}

}  // namespace baton
