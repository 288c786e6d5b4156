// Image classifiers as ModelBuilders: VGG-11/13/16/19 (Simonyan & Zisserman 2015) and
// ResNet-18/34/50/101/152 (He et al. 2016), torchvision's definitions layer for layer (parameter
// names, shapes and initialisation; the parameter counts are torchvision's, tested), split into
// global layers at the granularity pipelines cut them:
//   VGG:    [conv (+BN) + ReLU (+ the max pool after it)] × depth−3, fc6, fc7, classifier head
//   ResNet: [stem, residual block × Σ blocks, avgpool + fc head]
// (the planner describes CNNs from this builder, layer for layer: app/plan_model.h).
//
// Adaptations, exactly:
// - width w: every channel count c (and VGG's 4096 hidden units) becomes max(1, round(c·w)).
// - ResNet with image_size < 64: the stem is a 3×3 stride-1 convolution (padding 1) + BN + ReLU
//   without the max pool, instead of the 7×7 stride-2 convolution and the 3×3 stride-2 max pool
//   (the usual CIFAR adaptation): a 28-pixel image reaches the last stage at 4×4, not 1×1.
// - VGG: image_size must be a multiple of 32 (five 2×2 max pools); the first classifier layer takes
//   the final F×F feature map, F = image_size/32, flattened (512·F² inputs). At 224 that is
//   torchvision's 512·7·7 (its adaptive pool to 7×7 is then the identity); at 32 it is 512.
// - VGG dropout is model.dropout (torchvision's default is 0.5; configs/vgg16.toml sets it).
#pragma once
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "config/config.h"
#include "model/classifier_head.h"
#include "model/conv_layer.h"
#include "model/linear_layer.h"
#include "model/model_builder.h"
#include "model/residual_block.h"

namespace baton {

struct CnnDims {
  ModelKind kind = ModelKind::RESNET;  // RESNET | VGG
  int depth = 50;
  int image_size = 224, in_channels = 3, classes = 1000;
  double width = 1.0;
  bool batch_norm = true;  // VGG (ResNets always have it)
  float dropout = 0;       // VGG's classifier
};

// The CNN of a config's [model] section (kind "resnet" or "vgg"; n_layer is the depth). Throws
// Error (with a hint) for a depth the family does not have, an image the network cannot reduce, a
// dropout ResNets do not have.
CnnDims cnn_dims(const ModelConfig& m);

class CnnBuilder final : public ModelBuilder {
 public:
  explicit CnnBuilder(const CnnDims& dims);
  const CnnDims& dims() const { return d_; }

  std::string family() const override;
  std::string describe() const override;
  int num_layers() const override { return static_cast<int>(layers_.size()); }
  std::unique_ptr<Layer> make_layer(int g, const TensorParallel& tp, const Backend& be,
                                    Recompute recompute) const override;
  InputKind input_kind() const override { return InputKind::IMAGES; }
  int max_positions() const override { return 1; }
  int64_t input_elements(int B, int) const override {
    return int64_t(B) * d_.in_channels * d_.image_size * d_.image_size;
  }
  int64_t target_elements(int B, int) const override { return B; }
  std::vector<std::string> metric_names() const override { return {"top1", "top5"}; }
  // 3 × the forward FLOPs of the convolutions and linear layers (backward = 2 × forward; batch
  // norm, ReLU and pooling not counted), as MLPerf and the papers count CNN FLOPs.
  double flops_per_step(int64_t samples) const override { return 3.0 * forward_flops() * double(samples); }
  std::string flops_formula() const override;
  // Contiguous stages with forward FLOPs as even as the layers allow (greedy over the prefix sums);
  // Error when there are more stages than layers.
  std::vector<LayerRange> default_stages(int stages) const override;

  // Forward FLOPs of one image, in total and per global layer.
  double forward_flops() const;
  double layer_flops(int g) const { return flops_[g]; }
  std::string layer_name(int g) const;

 private:
  struct ConvRecipe {
    std::string name;
    ConvUnitSpec unit;
    std::optional<PoolSpec> pool;
  };
  using Recipe = std::variant<ConvRecipe, ResidualBlockSpec, LinearSpec, ClassifierSpec>;
  void build_resnet();
  void build_vgg();
  int ch(int c) const;
  CnnDims d_;
  std::vector<Recipe> layers_;
  std::vector<double> flops_;
};

std::shared_ptr<const CnnBuilder> make_cnn(const CnnDims& dims);

}  // namespace baton
