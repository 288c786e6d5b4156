// VGG and ResNet builders; see cnn.h.
#include "model/cnn.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.h"

namespace baton {
namespace {

// torchvision's VGG configurations: channels of each 3×3 conv, 0 = a 2×2 max pool.
const std::map<int, std::vector<int>>& vgg_configs() {
  static const std::map<int, std::vector<int>> cfgs{
      {11, {64, 0, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0}},
      {13, {64, 64, 0, 128, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0}},
      {16, {64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0}},
      {19, {64, 64, 0, 128, 128, 0, 256, 256, 256, 256, 0, 512, 512, 512, 512, 0, 512, 512, 512, 512, 0}}};
  return cfgs;
}

struct ResNetConfig {
  std::vector<int> blocks;
  bool bottleneck;
};
const std::map<int, ResNetConfig>& resnet_configs() {
  static const std::map<int, ResNetConfig> cfgs{{18, {{2, 2, 2, 2}, false}},
                                                {34, {{3, 4, 6, 3}, false}},
                                                {50, {{3, 4, 6, 3}, true}},
                                                {101, {{3, 4, 23, 3}, true}},
                                                {152, {{3, 8, 36, 3}, true}}};
  return cfgs;
}

template <class Map>
std::string depths_of(const Map& m) {
  std::string s;
  for (const auto& [d, cfg] : m) s += (s.empty() ? "" : ", ") + std::to_string(d);
  return s;
}

}  // namespace

CnnDims cnn_dims(const ModelConfig& m) {
  CnnDims d{.kind = m.kind, .depth = m.n_layer, .image_size = m.image_size, .in_channels = m.in_channels,
            .classes = m.classes, .width = m.width, .batch_norm = m.batch_norm, .dropout = float(m.dropout)};
  if (m.kind == ModelKind::RESNET) {
    BATON_REQUIRE(resnet_configs().count(m.n_layer),
                  fmt::format("model.n_layer = {} is not a ResNet depth", m.n_layer),
                  fmt::format("for model.kind = \"resnet\", n_layer is the depth: one of {}",
                              depths_of(resnet_configs())));
    BATON_REQUIRE(m.dropout == 0, fmt::format("model.dropout = {} but ResNets have no dropout", m.dropout),
                  "drop model.dropout (torchvision's ResNets have none)");
  } else {
    BATON_ASSERT(m.kind == ModelKind::VGG, "not a CNN: model.kind = {}", to_string(m.kind));
    BATON_REQUIRE(vgg_configs().count(m.n_layer), fmt::format("model.n_layer = {} is not a VGG depth", m.n_layer),
                  fmt::format("for model.kind = \"vgg\", n_layer is the depth: one of {}", depths_of(vgg_configs())));
    BATON_REQUIRE(m.image_size % 32 == 0,
                  fmt::format("VGG cannot reduce a {0}×{0} image: its five 2×2 max pools need a multiple of 32",
                              m.image_size),
                  "set model.image_size to a multiple of 32 (and images of that size), or use model.kind = "
                  "\"resnet\", which takes any size");
    BATON_REQUIRE(m.dropout < 1, fmt::format("model.dropout = {} would drop everything", m.dropout),
                  "use a probability below 1 (torchvision's VGG uses 0.5)");
  }
  return d;
}

CnnBuilder::CnnBuilder(const CnnDims& dims) : d_(dims) {
  if (d_.kind == ModelKind::RESNET)
    build_resnet();
  else
    build_vgg();
  for (const Recipe& r : layers_) {
    flops_.push_back(std::visit(
        [](const auto& x) -> double {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, ConvRecipe>) return ConvUnit(x.unit).flops_per_sample();
          if constexpr (std::is_same_v<T, ResidualBlockSpec>) return ResidualBlock(x, 4).flops_per_sample();
          if constexpr (std::is_same_v<T, LinearSpec>) return 2.0 * x.in * x.out;
          if constexpr (std::is_same_v<T, ClassifierSpec>) return 2.0 * x.C * x.classes;
        },
        r));
  }
}

int CnnBuilder::ch(int c) const { return std::max(1, int(std::lround(c * d_.width))); }

void CnnBuilder::build_resnet() {
  const ResNetConfig& cfg = resnet_configs().at(d_.depth);
  const bool small = d_.image_size < 64;
  ConvUnitSpec stem{.conv = "conv1", .bn = "bn1", .C = d_.in_channels, .H = d_.image_size, .W = d_.image_size,
                    .K = ch(64), .R = small ? 3 : 7, .stride = small ? 1 : 2, .pad = small ? 1 : 3};
  std::optional<PoolSpec> pool;
  if (!small) pool = PoolSpec{.R = 3, .stride = 2, .pad = 1};
  const ConvUnit unit(stem);
  int H = unit.P();
  if (pool) H = (H + 2 * pool->pad - pool->R) / pool->stride + 1;
  layers_.push_back(ConvRecipe{"stem", stem, pool});
  int C = ch(64);
  for (size_t s = 0; s < cfg.blocks.size(); ++s) {
    for (int i = 0; i < cfg.blocks[s]; ++i) {
      ResidualBlockSpec b{.name = fmt::format("layer{}.{}", s + 1, i), .C = C, .H = H, .W = H,
                          .planes = ch(64 << s), .stride = (s > 0 && i == 0) ? 2 : 1, .bottleneck = cfg.bottleneck};
      H = (H + 2 - 3) / b.stride + 1;  // the 3×3 (padding 1) carries the stride
      C = b.out_channels();
      layers_.push_back(b);
    }
  }
  layers_.push_back(ClassifierSpec{.name = "fc", .C = C, .H = H, .W = H, .classes = d_.classes});
}

void CnnBuilder::build_vgg() {
  const std::vector<int>& cfg = vgg_configs().at(d_.depth);
  int C = d_.in_channels, H = d_.image_size, feature = 0;
  for (size_t i = 0; i < cfg.size(); ++i) {
    if (cfg[i] == 0) continue;  // folded into the conv before it
    ConvUnitSpec u{.conv = fmt::format("features.{}", feature), .bn = fmt::format("features.{}", feature + 1),
                   .C = C, .H = H, .W = H, .K = ch(cfg[i]), .R = 3, .stride = 1, .pad = 1, .bias = true,
                   .batch_norm = d_.batch_norm};
    feature += d_.batch_norm ? 3 : 2;
    std::optional<PoolSpec> pool;
    if (i + 1 < cfg.size() && cfg[i + 1] == 0) {
      pool = PoolSpec{};
      feature += 1;
      H /= 2;
    }
    C = u.K;
    layers_.push_back(ConvRecipe{fmt::format("conv{}", layers_.size() + 1), u, pool});
  }
  const int hidden = ch(4096);
  const int fc6 = static_cast<int>(layers_.size());
  layers_.push_back(LinearSpec{.name = "classifier.0", .in = C * H * H, .out = hidden, .H = H, .W = H,
                               .dropout = d_.dropout, .layer = fc6});
  layers_.push_back(LinearSpec{.name = "classifier.3", .in = hidden, .out = hidden, .dropout = d_.dropout,
                               .layer = fc6 + 1});
  layers_.push_back(ClassifierSpec{.name = "classifier.6", .C = hidden, .classes = d_.classes, .init_std = 0.01f});
}

std::string CnnBuilder::family() const {
  if (d_.kind == ModelKind::RESNET) return fmt::format("ResNet-{}", d_.depth);
  return fmt::format("VGG-{}{}", d_.depth, d_.batch_norm ? "-BN" : "");
}

std::string CnnBuilder::describe() const {
  std::string extras;
  if (d_.width != 1.0) extras += fmt::format(", width {}", d_.width);
  if (d_.kind == ModelKind::RESNET && d_.image_size < 64) extras += ", small-image stem";
  if (d_.kind == ModelKind::VGG && d_.dropout > 0) extras += fmt::format(", dropout {}", d_.dropout);
  return fmt::format("{} ({} layers{}), {}×{}×{} images, {} classes", family(), num_layers(), extras, d_.image_size,
                     d_.image_size, d_.in_channels, d_.classes);
}

std::string CnnBuilder::flops_formula() const {
  return fmt::format("3 × forward FLOPs of the convolutions and linear layers ({:.3f} GFLOP per image) × images",
                     forward_flops() / 1e9);
}

double CnnBuilder::forward_flops() const {
  double f = 0;
  for (double x : flops_) f += x;
  return f;
}

std::string CnnBuilder::layer_name(int g) const {
  return std::visit([](const auto& x) { return x.name; }, layers_.at(g));
}

std::unique_ptr<Layer> CnnBuilder::make_layer(int g, const TensorParallel& tp, const Backend& be, Recompute) const {
  BATON_ASSERT(g >= 0 && g < num_layers(), "{} layer {} of {}", family(), g, num_layers());
  BATON_REQUIRE(!tp.active(), fmt::format("{} has no tensor-parallel layers", family()),
                "set parallel.tp = 1 for a CNN (split it with pipelines and data parallelism instead)");
  return std::visit(
      [&](const auto& x) -> std::unique_ptr<Layer> {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, ConvRecipe>) return std::make_unique<ConvLayer>(x.name, x.unit, x.pool, g == 0, be);
        if constexpr (std::is_same_v<T, ResidualBlockSpec>) return std::make_unique<ResidualBlock>(x, be.act_size());
        if constexpr (std::is_same_v<T, LinearSpec>) return std::make_unique<LinearLayer>(x, be);
        if constexpr (std::is_same_v<T, ClassifierSpec>) return std::make_unique<ClassifierHead>(x, be);
      },
      layers_[g]);
}

std::vector<LayerRange> CnnBuilder::default_stages(int stages) const {
  const int L = num_layers();
  BATON_REQUIRE(stages >= 1 && stages <= L,
                fmt::format("{} has {} layers: it cannot be split into {} pipeline stages", family(), L, stages),
                "use fewer stages (parallel.pp × parallel.vp)");
  // Stage s ends at the first layer whose FLOP prefix reaches (s+1)/stages of the total, leaving at
  // least one layer for each stage after it.
  const double total = forward_flops();
  std::vector<LayerRange> out;
  int begin = 0;
  double prefix = 0;
  for (int s = 0; s < stages; ++s) {
    int end = begin + 1;
    prefix += flops_[begin];
    const double target = total * (s + 1) / stages;
    while (end < L - (stages - 1 - s) && prefix + flops_[end] / 2 < target) prefix += flops_[end++];
    if (s == stages - 1) end = L;
    out.push_back({begin, end});
    begin = end;
  }
  return out;
}

std::shared_ptr<const CnnBuilder> make_cnn(const CnnDims& dims) { return std::make_shared<const CnnBuilder>(dims); }

}  // namespace baton
