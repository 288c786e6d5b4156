// CNN layer tables (model_desc.h) for the papers' image models: VGG-16 / VGG-19 (PipeDream, HetPipe)
// and ResNet-50 / ResNet-152 (PipeDream, HetPipe, MadPipe), torchvision layouts, fp32.
// Granularity: VGG one entry per conv (+ReLU, + the max-pool that follows it) and per FC layer;
// ResNet the stem, one entry per bottleneck block (the linearised chain MadPipe and PipeDream
// partition), and the pooled classifier. FLOPs: a k×k conv is 2·Cin·k²·Cout·H_out·W_out per image
// forward, backward twice that (input and weight gradients). Stash: a conv keeps its input and its
// output (ReLU in place); batch norm adds its normalised output.
#include <cmath>

#include "core/error.h"
#include "plan/model_desc.h"

namespace baton::plan {
namespace {

constexpr double kF = 4;  // fp32 bytes

struct Builder {
  ModelDesc m;
  double b;
  int C, H;  // current channels and spatial size (square)

  // A conv of this entry: returns its output elements per image and adds its FLOPs and params.
  double conv(LayerDesc& l, int cin, int cout, int k, int stride, int hin, bool bn, bool bias) {
    const int hout = (hin + stride - 1) / stride;
    const double out = double(cout) * hout * hout;
    l.fwd_flops += 2.0 * cin * k * k * out * b;
    l.bwd_flops += 4.0 * cin * k * k * out * b;
    l.params += double(cin) * k * k * cout + (bias ? cout : 0) + (bn ? 2 * cout : 0);
    l.stash_bytes += (bn ? 2 : 1) * out * b * kF;
    l.fwd_mem_bytes += (bn ? 4 : 2) * out * b * kF;
    return out;
  }
  void finish(LayerDesc& l, double in_elems) {
    l.stash_bytes += in_elems * b * kF;
    l.out_bytes = double(C) * H * H * b * kF;
    l.bwd_mem_bytes = 2 * l.fwd_mem_bytes;
    m.layers.push_back(l);
  }
};

ModelDesc vgg(const std::string& name, const std::vector<int>& cfg, int image, int mb) {
  Builder B{{}, double(mb), 3, image};
  for (size_t i = 0; i < cfg.size(); ++i) {
    if (cfg[i] == 0) continue;  // pools are folded into the conv before them
    LayerDesc l;
    l.name = fmt::format("conv{}", B.m.layers.size() + 1);
    const double in = double(B.C) * B.H * B.H;
    B.conv(l, B.C, cfg[i], 3, 1, B.H, false, true);
    B.C = cfg[i];
    if (i + 1 < cfg.size() && cfg[i + 1] == 0) {
      B.H /= 2;
      l.stash_bytes += double(B.C) * B.H * B.H * B.b * kF;
    }
    B.finish(l, in);
  }
  // Adaptive average pool to 7×7 (torchvision), then 25088 -> 4096 -> 4096 -> 1000.
  const int fc_in = B.C * 7 * 7;
  const int dims[4] = {fc_in, 4096, 4096, 1000};
  for (int i = 0; i < 3; ++i) {
    LayerDesc l;
    l.name = fmt::format("fc{}", i + 1);
    l.fwd_flops = 2.0 * dims[i] * dims[i + 1] * B.b;
    l.bwd_flops = 2 * l.fwd_flops;
    l.params = double(dims[i]) * dims[i + 1] + dims[i + 1];
    l.stash_bytes = (dims[i] + dims[i + 1]) * B.b * kF;
    l.fwd_mem_bytes = 2 * dims[i + 1] * B.b * kF;
    l.bwd_mem_bytes = 2 * l.fwd_mem_bytes;
    l.out_bytes = dims[i + 1] * B.b * kF;
    B.m.layers.push_back(l);
  }
  B.m.name = name;
  return B.m;
}

ModelDesc resnet(const std::string& name, const std::vector<int>& blocks, int image, int mb) {
  Builder B{{}, double(mb), 3, image};
  {
    LayerDesc l;
    l.name = "stem";
    const double in = 3.0 * image * image;
    B.conv(l, 3, 64, 7, 2, B.H, true, false);
    B.C = 64;
    B.H = (B.H + 1) / 2;
    B.H = (B.H + 1) / 2;  // 3×3 max-pool, stride 2
    l.stash_bytes += double(B.C) * B.H * B.H * B.b * kF;
    B.finish(l, in);
  }
  int width = 64;
  for (size_t stage = 0; stage < blocks.size(); ++stage, width *= 2) {
    for (int i = 0; i < blocks[stage]; ++i) {
      LayerDesc l;
      l.name = fmt::format("layer{}.{}", stage + 1, i);
      const int stride = (stage > 0 && i == 0) ? 2 : 1;  // torchvision v1.5: stride on the 3×3
      const double in = double(B.C) * B.H * B.H;
      B.conv(l, B.C, width, 1, 1, B.H, true, false);
      B.conv(l, width, width, 3, stride, B.H, true, false);
      const int hout = (B.H + stride - 1) / stride;
      B.conv(l, width, 4 * width, 1, 1, hout, true, false);
      if (i == 0) B.conv(l, B.C, 4 * width, 1, stride, B.H, true, false);  // downsample
      B.C = 4 * width;
      B.H = hout;
      B.finish(l, in);
    }
  }
  LayerDesc fc;
  fc.name = "fc";
  fc.fwd_flops = 2.0 * B.C * 1000 * B.b;
  fc.bwd_flops = 2 * fc.fwd_flops;
  fc.params = double(B.C) * 1000 + 1000;
  fc.stash_bytes = (double(B.C) * B.H * B.H + B.C) * B.b * kF;
  fc.fwd_mem_bytes = 2 * double(B.C) * B.H * B.H * B.b * kF;
  fc.bwd_mem_bytes = 2 * fc.fwd_mem_bytes;
  fc.out_bytes = 1000 * B.b * kF;
  B.m.layers.push_back(fc);
  B.m.name = name;
  return B.m;
}

}  // namespace

ModelDesc cnn_desc(const std::string& name, int image, int micro_batch) {
  BATON_REQUIRE(image >= 32 && micro_batch >= 1,
                fmt::format("CNN description needs image >= 32 and micro-batch >= 1, got {} and {}",
                            image, micro_batch),
                "use e.g. image 224, micro-batch 32");
  ModelDesc m;
  if (name == "vgg16")
    m = vgg(name, {64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0},
            image, micro_batch);
  else if (name == "vgg19")
    m = vgg(name, {64, 64, 0, 128, 128, 0, 256, 256, 256, 256, 0, 512, 512, 512, 512, 0, 512, 512,
                   512, 512, 0},
            image, micro_batch);
  else if (name == "resnet50")
    m = resnet(name, {3, 4, 6, 3}, image, micro_batch);
  else if (name == "resnet152")
    m = resnet(name, {3, 8, 36, 3}, image, micro_batch);
  else
    throw Error(fmt::format("unknown CNN '{}'", name), "use vgg16, vgg19, resnet50 or resnet152");
  m.micro_batch = micro_batch;
  m.input_bytes = 3.0 * image * image * micro_batch * kF;
  for (const auto& l : m.layers) {
    m.model_flops_per_sample += (l.fwd_flops + l.bwd_flops) / micro_batch;
    m.total_params += l.params;
  }
  m.hardware_flops_per_sample = m.model_flops_per_sample;
  return m;
}

}  // namespace baton::plan
