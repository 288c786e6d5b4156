// ResidualBlock: a ResNet block (He et al. 2016), torchvision's definitions layer for layer.
//   basic (ResNet-18/34):  conv3×3/s → BN → ReLU → conv3×3 → BN          (+ shortcut) → ReLU
//   bottleneck (50/101/152, "v1.5": the stride on the 3×3):
//                          conv1×1 → BN → ReLU → conv3×3/s → BN → ReLU → conv1×1 (×4) → BN
//                                                                         (+ shortcut) → ReLU
// The shortcut is the identity, or conv1×1/s → BN ("downsample") when the stride or the channel
// count changes. Parameter names are torchvision's: "<name>.conv1.weight", "<name>.bn1.weight",
// "<name>.downsample.0.weight", "<name>.downsample.1.running_mean", ...
// Saved per micro-batch: each unit's saved values (the shortcut's output is only needed in
// forward, in scratch) and the block's output, which the last unit writes: its batch-norm op adds
// the shortcut and applies the ReLU (backend.h batchnorm_relu_forward).
#pragma once
#include <vector>

#include "model/conv_unit.h"

namespace baton {

struct ResidualBlockSpec {
  std::string name;  // e.g. "layer2.0"
  int C = 64, H = 56, W = 56;  // input
  int planes = 64, stride = 1;
  bool bottleneck = false;
  int out_channels() const { return bottleneck ? 4 * planes : planes; }
};

class ResidualBlock : public Layer {
 public:
  ResidualBlock(const ResidualBlockSpec& spec, size_t act_size);
  std::string name() const override { return spec_.name; }
  void add_params(ParamTable& table) override;
  size_t saved_bytes(int B, int T) const override;
  size_t workspace_bytes(int B, int T) const override;
  size_t output_bytes(int B, int) const override { return out_elems(B) * act_size_; }
  size_t input_bytes(int B, int) const override { return units_.front().in_elems(B) * act_size_; }
  void* output(void* saved, int B, int T) const override;
  void forward(const LayerCtx& ctx, const void* in, void* saved) override;
  void backward(const LayerCtx& ctx, const void* in, const void* dout, void* din, void* saved) override;

  int out_channels() const { return spec_.out_channels(); }
  int out_size() const { return units_.back().P(); }
  double flops_per_sample() const;

 private:
  struct Saved;
  struct Scratch;
  Saved views(Carver& c, int B, const Scratch* fwd) const;
  Scratch scratch(Carver& c, int B) const;
  size_t out_elems(int N) const { return units_.back().out_elems(N); }
  ResidualBlockSpec spec_;
  std::vector<ConvUnit> units_;
  std::vector<ConvUnit> down_;  // the shortcut's conv + BN, or none
  size_t act_size_;
};

}  // namespace baton
