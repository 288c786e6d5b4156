// ClassifierHead: (global average pooling) + fully connected + softmax cross-entropy, with top-1 /
// top-5 hits when evaluating — a ResNet's avgpool + fc, a VGG's last Linear. The loss layer of a
// CNN: its output is the per-sample losses [N] (fp32), its metrics the per-sample hits.
// Input [N, C, H, W] (H·W > 1: averaged over H×W first, as AdaptiveAvgPool2d(1)) or [N, C].
// Weights "<name>.weight" [classes, C] and "<name>.bias": normal(0, 0.01) and zeros (VGG), or
// PyTorch's default Linear initialisation, uniform(±1/√C) for both (ResNet).
// In training the forward turns the logits into their gradient in place (as the GPT's head).
#pragma once
#include "model/carver.h"
#include "model/layer.h"

namespace baton {

struct ClassifierSpec {
  std::string name;  // "fc" (ResNet) or "classifier.6" (VGG)
  int C = 1, H = 1, W = 1;
  int classes = 1000;
  float init_std = 0;  // > 0: normal(0, init_std) weights, zero bias; 0: PyTorch's default
};

class ClassifierHead : public Layer {
 public:
  ClassifierHead(ClassifierSpec spec, const Backend& be);
  std::string name() const override { return s_.name; }
  void add_params(ParamTable& table) override;
  size_t saved_bytes(int B, int T) const override;
  size_t workspace_bytes(int B, int T) const override;
  size_t output_bytes(int B, int) const override { return size_t(B) * sizeof(float); }
  size_t input_bytes(int B, int) const override { return size_t(B) * s_.C * s_.H * s_.W * act_size_; }
  int64_t loss_terms(int B, int) const override { return B; }
  void* output(void* saved, int B, int T) const override;
  const float* metric(const void* saved, int B, int T, int m) const override;
  void forward(const LayerCtx& ctx, const void* in, void* saved) override;
  void backward(const LayerCtx& ctx, const void* in, const void* dout, void* din, void* saved) override;
  double flops_per_sample() const { return 2.0 * s_.C * s_.classes; }

 private:
  struct Saved;
  Saved views(Carver& c, int B) const;
  Saved views(const void* saved, int B) const;
  bool pools() const { return s_.H * s_.W > 1; }
  Pool2d pool(int N) const;
  ClassifierSpec s_;
  const Backend& be_;  // pooling state sizes
  size_t act_size_;
  int w_ = -1, b_ = -1;
};

}  // namespace baton
