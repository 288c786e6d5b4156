// ConvLayer: one ConvUnit (conv_unit.h) optionally followed by max pooling — a VGG feature layer
// (3×3 conv, ReLU, and the 2×2 pool that follows it in torchvision's `features`, folded in) or a
// ResNet's stem (7×7/2 conv, batch norm, ReLU, 3×3/2 max pool; 3×3/1 conv without the pool for
// small images). The model's first layer reads the micro-batch's images (fp32 NCHW; converted in
// scratch to the act dtype and the backend's image layout when those differ).
// Saved per micro-batch: the unit's (its output included), then, with pooling, the pool's state
// (max pooling's argmax) and its output.
#pragma once
#include <optional>

#include "model/conv_unit.h"

namespace baton {

struct PoolSpec {
  int R = 2, stride = 2, pad = 0;  // square window
};

class ConvLayer : public Layer {
 public:
  ConvLayer(std::string name, ConvUnitSpec unit, std::optional<PoolSpec> pool, bool first, const Backend& be);
  std::string name() const override { return name_; }
  void add_params(ParamTable& table) override { unit_.add_params(table); }
  size_t saved_bytes(int B, int T) const override;
  size_t workspace_bytes(int B, int T) const override;
  size_t output_bytes(int B, int) const override { return out_elems(B) * act_size_; }
  size_t input_bytes(int B, int) const override { return first_ ? 0 : unit_.in_elems(B) * act_size_; }
  void* output(void* saved, int B, int T) const override;
  void forward(const LayerCtx& ctx, const void* in, void* saved) override;
  void backward(const LayerCtx& ctx, const void* in, const void* dout, void* din, void* saved) override;

  // Output channels and size.
  int out_channels() const { return unit_.spec().K; }
  int out_size() const;
  double flops_per_sample() const { return unit_.flops_per_sample(); }

 private:
  struct Saved;
  Saved views(Carver& c, int B) const;
  Pool2d pool(int N) const;
  size_t out_elems(int N) const;
  // The first layer's input: the images themselves, or converted into `scratch`.
  const void* input(const LayerCtx& ctx, const void* in, void* scratch) const;
  std::string name_;
  ConvUnit unit_;
  std::optional<PoolSpec> pool_;
  bool first_;
  const Backend& be_;  // pooling state sizes
  size_t act_size_;
  bool convert_images_;
};

}  // namespace baton
