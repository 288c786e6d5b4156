// LinearLayer: fully connected + ReLU (+ dropout in training) — a VGG classifier's hidden layers
// (torchvision: Linear, ReLU, Dropout). The input is the previous layer's output read as [N, in]
// (a feature map [N,C,H,W] flattened in C·H·W order, as torch.flatten: converted from the
// backend's image layout first when that is not NCHW). Weights "<name>.weight"
// [out,in] normal(0, 0.01), "<name>.bias" zeros (torchvision's VGG initialisation).
// Dropout masks are core/dropout_mask.h's, keyed by (the batch's seed, this layer's global index,
// the sample row): every layout drops the same activations.
// Saved per micro-batch: the output y [N,out] only. The ReLU's mask is read back from y: where
// dropout zeroed y the gradient is zero anyway, and elsewhere y > 0 exactly where the ReLU passed.
#pragma once
#include "model/layer.h"

namespace baton {

struct LinearSpec {
  std::string name;  // e.g. "classifier.0"
  int in = 1, out = 1;
  int H = 1, W = 1;   // the input is a feature map [in / (H·W), H, W] flattened (H·W > 1: VGG's fc6)
  float dropout = 0;  // probability of dropping (training only)
  int layer = 0;      // global layer index (the dropout stream)
};

class LinearLayer : public Layer {
 public:
  LinearLayer(LinearSpec spec, const Backend& be)
      : s_(std::move(spec)), act_size_(be.act_size()),
        flatten_(s_.H * s_.W > 1 && be.image_layout() != Backend::ImageLayout::NCHW) {}
  std::string name() const override { return s_.name; }
  void add_params(ParamTable& table) override;
  size_t saved_bytes(int B, int T) const override { return output_bytes(B, T); }
  size_t workspace_bytes(int B, int T) const override {
    return output_bytes(B, T) + (flatten_ ? 2 * input_bytes(B, T) : 0);
  }
  size_t output_bytes(int B, int) const override { return size_t(B) * s_.out * act_size_; }
  size_t input_bytes(int B, int) const override { return size_t(B) * s_.in * act_size_; }
  void* output(void* saved, int, int) const override { return saved; }
  void forward(const LayerCtx& ctx, const void* in, void* saved) override;
  void backward(const LayerCtx& ctx, const void* in, const void* dout, void* din, void* saved) override;
  double flops_per_sample() const { return 2.0 * s_.in * s_.out; }

 private:
  uint64_t dropout_seed(const LayerCtx& ctx) const;
  // The input in NCHW order: `in` itself, or converted into `scratch`.
  const void* flat_input(const LayerCtx& ctx, const void* in, void* scratch) const;
  LinearSpec s_;
  size_t act_size_;
  bool flatten_;  // the input feature map must be converted to NCHW order
  int w_ = -1, b_ = -1;
};

}  // namespace baton
