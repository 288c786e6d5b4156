// ConvUnit: convolution (+ bias) (+ batch normalization) (+ ReLU), the building block of the CNN
// layers (conv_layer.h, residual_block.h) — not a Layer itself: a layer owns one or several and
// decides where their outputs live. torchvision's parameter names and initialisation: the conv
// weight "<conv>.weight" [K,C,R,R] is Kaiming-normal (fan_out, ReLU gain: std = √(2 / (K·R·R))),
// its bias zeros; batch norm "<bn>.weight" ones, "<bn>.bias" zeros, and the buffers
// "<bn>.running_mean" (zeros) and "<bn>.running_var" (ones).
//
// Batch norm (Ioffe & Szegedy 2015; PyTorch's BatchNorm2d, eps 1e-5, momentum 0.1): training
// normalises with the micro-batch's statistics over (N, H, W) and moves the running statistics
// toward them — running_mean ← 0.9·running_mean + 0.1·mean, running_var ← 0.9·running_var +
// 0.1·var·n/(n−1) (the unbiased variance, n = N·H·W); evaluation normalises with the running
// statistics. Each micro-batch is its own batch (no cross-replica statistics, as PyTorch's DDP
// without SyncBatchNorm).
//
// Saved per micro-batch (carve): with batch norm the conv output z [N,K,P,Q] and the batch's mean
// and variance [K]; the unit's output y [N,K,P,Q] (after ReLU when it has one; the ReLU runs in
// place). Backward needs 2·N·K·P·Q activations of scratch.
#pragma once
#include <string>

#include "model/carver.h"
#include "model/layer.h"

namespace baton {

struct ConvUnitSpec {
  std::string conv, bn;  // parameter name prefixes (bn unused without batch norm)
  int C = 1, H = 1, W = 1;  // input channels and size
  int K = 1, R = 1, stride = 1, pad = 0;  // output channels, square kernel
  bool bias = false, batch_norm = true, relu = true;
};

class ConvUnit {
 public:
  explicit ConvUnit(ConvUnitSpec spec) : s_(std::move(spec)) {}
  const ConvUnitSpec& spec() const { return s_; }
  void add_params(ParamTable& table);
  Conv2d conv(int N) const;
  int P() const { return conv(1).P(); }
  int Q() const { return conv(1).Q(); }
  size_t out_elems(int N) const { return size_t(N) * s_.K * P() * Q(); }
  size_t in_elems(int N) const { return size_t(N) * s_.C * s_.H * s_.W; }
  // Forward FLOPs per sample (the convolution's multiply-adds × 2).
  double flops_per_sample() const;

  struct Saved {
    void* z = nullptr;  // conv output (batch norm's input); == y without batch norm
    float *mean = nullptr, *var = nullptr;
    void* y = nullptr;
  };
  // The unit's saved views. Without `keep_output` y is not carved (a layer that does not keep the
  // unit's output, e.g. the last unit of a residual block): give it with output_to before use.
  Saved carve(Carver& c, int N, bool keep_output = true) const;
  void output_to(Saved& s, void* y) const {
    s.y = y;
    if (!s_.batch_norm) s.z = y;
  }
  // Scratch bytes of backward.
  size_t backward_scratch_bytes(int N, size_t act_size) const { return 2 * out_elems(N) * act_size; }

  // add_then_relu (nullable; only for a unit without its own ReLU): y = ReLU(bn(conv(x)) +
  // add_then_relu), the residual block's shortcut added and the block's ReLU applied in the unit's
  // batch-norm op.
  void forward(const LayerCtx& ctx, const void* x, const Saved& s, int N, const void* add_then_relu = nullptr) const;
  // dy: gradient w.r.t. y; dx (overwritten; null: not computed) w.r.t. x; parameter gradients
  // accumulate. `scratch`: backward_scratch_bytes.
  void backward(const LayerCtx& ctx, const void* x, const void* dy, void* dx, const Saved& s, int N,
                void* scratch) const;

 private:
  ConvUnitSpec s_;
  int w_ = -1, b_ = -1, gamma_ = -1, beta_ = -1, run_mean_ = -1, run_var_ = -1;
};

inline constexpr float kBatchNormEps = 1e-5f;
inline constexpr float kBatchNormMomentum = 0.1f;

}  // namespace baton
