// The generic layer stack with a model that is not a GPT (issue 11): a toy image model built by its
// own ModelBuilder — a per-feature scale layer with a non-trainable running-mean buffer (the shape
// of batch norm's running statistics) and a squared-error loss layer with one loss term per sample —
// trained through SequentialModel with AdamW. Checked: images and per-sample targets flow through
// MicroBatch; the loss scale is the model's (one term per sample); the gradient matches finite
// differences; the buffer lives apart from the parameters (not in the flat parameters or
// gradients, not in the optimizer's segments, so never in the grad norm), changes only as the layer
// updates it, and is saved in checkpoints as buffers/<name> and restored from them.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "config/config.h"
#include "core/rng.h"
#include "model/sequential_model.h"
#include "optim/adamw.h"
#include "optim/data_parallel.h"
#include "test_checkpoint_fixture.h"
#include "train/checkpoint/checkpoint_state.h"

namespace baton {
namespace {

constexpr int kD = 6;  // features per image

// out[b, d] = w[d] · x[b, d]; in training, mean[d] ← 0.9 · mean[d] + 0.1 · (batch mean of x[·, d]).
class Scale final : public Layer {
 public:
  std::string name() const override { return "scale"; }
  void add_params(ParamTable& t) override {
    w_ = t.add({.name = "scale.weight", .shape = {kD}, .init = ParamSpec::Init::ONES});
    mean_ = t.add_buffer({.name = "scale.running_mean", .shape = {kD}, .init = ParamSpec::Init::ZEROS});
  }
  size_t saved_bytes(int B, int) const override { return size_t(B) * kD * sizeof(float); }
  size_t workspace_bytes(int, int) const override { return 0; }
  size_t output_bytes(int B, int) const override { return size_t(B) * kD * sizeof(float); }
  size_t input_bytes(int, int) const override { return 0; }  // reads the images
  void* output(void* saved, int, int) const override { return saved; }
  void forward(const LayerCtx& ctx, const void*, void* saved) override {
    const float* w = static_cast<const float*>(ctx.param(w_));
    auto* out = static_cast<float*>(saved);
    for (int b = 0; b < ctx.B; ++b)
      for (int d = 0; d < kD; ++d) out[b * kD + d] = w[d] * ctx.images[b * kD + d];
    if (!ctx.training) return;
    float* mean = ctx.buffer(mean_);
    for (int d = 0; d < kD; ++d) {
      double s = 0;
      for (int b = 0; b < ctx.B; ++b) s += ctx.images[b * kD + d];
      mean[d] = 0.9f * mean[d] + 0.1f * static_cast<float>(s / ctx.B);
    }
  }
  void backward(const LayerCtx& ctx, const void*, const void* dout, void*, void*) override {
    const auto* g = static_cast<const float*>(dout);
    float* dw = ctx.grad(w_);
    for (int b = 0; b < ctx.B; ++b)
      for (int d = 0; d < kD; ++d) dw[d] += g[b * kD + d] * ctx.images[b * kD + d];
  }

 private:
  int w_ = -1, mean_ = -1;
};

// loss[b] = Σ_d (x[b, d] − target[b])²; its gradient (scaled by loss_scale) is prepared in forward.
class SquareLoss final : public Layer {
 public:
  std::string name() const override { return "square_loss"; }
  void add_params(ParamTable&) override {}
  size_t saved_bytes(int B, int) const override { return size_t(B) * (kD + 1) * sizeof(float); }
  size_t workspace_bytes(int, int) const override { return 0; }
  size_t output_bytes(int B, int) const override { return size_t(B) * sizeof(float); }
  size_t input_bytes(int B, int) const override { return size_t(B) * kD * sizeof(float); }
  int64_t loss_terms(int B, int) const override { return B; }
  void* output(void* saved, int, int) const override { return saved; }
  void forward(const LayerCtx& ctx, const void* in, void* saved) override {
    const auto* x = static_cast<const float*>(in);
    auto* loss = static_cast<float*>(saved);
    float* grad = loss + ctx.B;
    for (int b = 0; b < ctx.B; ++b) {
      double s = 0;
      for (int d = 0; d < kD; ++d) {
        const double e = x[b * kD + d] - ctx.targets[b];
        s += e * e;
        grad[b * kD + d] = static_cast<float>(2 * e * ctx.loss_scale);
      }
      loss[b] = static_cast<float>(s);
    }
  }
  void backward(const LayerCtx& ctx, const void*, const void*, void* din, void* saved) override {
    const float* grad = static_cast<const float*>(saved) + ctx.B;
    std::copy(grad, grad + size_t(ctx.B) * kD, static_cast<float*>(din));
  }
};

class ToyImages final : public ModelBuilder {
 public:
  std::string family() const override { return "toy"; }
  std::string describe() const override { return "toy image model"; }
  int num_layers() const override { return 2; }
  std::unique_ptr<Layer> make_layer(int g, const TensorParallel&, const Backend&, Recompute) const override {
    if (g == 0) return std::make_unique<Scale>();
    return std::make_unique<SquareLoss>();
  }
  InputKind input_kind() const override { return InputKind::IMAGES; }
  int max_positions() const override { return 1; }
  int64_t input_elements(int B, int) const override { return int64_t(B) * kD; }
  int64_t target_elements(int B, int) const override { return B; }
  double flops_per_step(int64_t samples) const override { return 6.0 * samples * kD; }
  std::string flops_formula() const override { return "6*B*D"; }
  std::vector<LayerRange> default_stages(int stages) const override {
    return stages == 1 ? std::vector<LayerRange>{{0, 2}} : std::vector<LayerRange>{{0, 1}, {1, 2}};
  }
};

struct Batch {
  std::vector<float> images;
  std::vector<int32_t> targets;
  MicroBatch view(int B) const { return {.B = B, .T = 1, .images = images.data(), .targets = targets.data()}; }
};

Batch batch(int B, uint64_t seed) {
  Rng rng(seed);
  Batch b;
  for (int i = 0; i < B * kD; ++i) b.images.push_back(static_cast<float>(rng.normal()));
  for (int i = 0; i < B; ++i) b.targets.push_back(static_cast<int32_t>(rng.below(3)));
  return b;
}

TEST(SequentialModel, BuffersAreNotParameters) {
  auto be = make_cpu_backend();
  SequentialModel m(std::make_shared<ToyImages>(), *be);
  m.init_weights(1);
  const ParamTable& t = m.table();
  ASSERT_EQ(t.size(), 1);
  ASSERT_EQ(t.num_buffers(), 1);
  EXPECT_EQ(t.find("scale.running_mean"), -1);
  EXPECT_EQ(t.find_buffer("scale.running_mean"), 0);
  EXPECT_EQ(t.buffers_total(), size_t(kD));
  ASSERT_NE(m.buffers(), nullptr);
  for (int d = 0; d < kD; ++d) EXPECT_EQ(m.buffers()[d], 0.0f);  // Init::ZEROS
  // The optimizer and the gradient reductions see the parameters only.
  DataParallelGrads grads(*be, t, m.layer_of_param(), nullptr, false, 1 << 20, true);
  size_t updated = 0;
  for (const UpdateSegment& s : grads.segments()) updated += s.n;
  EXPECT_EQ(updated, t.count());
  EXPECT_EQ(t.count(), size_t(kD));
  // A buffer must start at a constant, and a name is one tensor.
  ParamTable bad;
  EXPECT_THROW(bad.add_buffer({.name = "x", .shape = {2}}), Error);
  bad.add({.name = "y", .shape = {2}});
  EXPECT_THROW(bad.add_buffer({.name = "y", .shape = {2}, .init = ParamSpec::Init::ZEROS}), Error);
}

TEST(SequentialModel, ImagesTargetsLossScaleAndGradient) {
  auto be = make_cpu_backend();
  SequentialModel m(std::make_shared<ToyImages>(), *be);
  m.init_weights(1);
  const int B = 4;
  m.reserve(B, 1, 1);
  const Batch x = batch(B, 3);
  // The mean loss per term (one per sample) against a direct computation.
  const double sum = m.forward(0, x.view(B), false, 0.0f);
  double want = 0;
  for (int b = 0; b < B; ++b)
    for (int d = 0; d < kD; ++d) want += std::pow(x.images[b * kD + d] - x.targets[b], 2);  // w = 1
  EXPECT_NEAR(sum, want, 1e-4 * want);
  // d(mean loss)/dw by finite differences; the model's scale is 1 / target_elements(B) = 1 / B.
  m.zero_grads();
  m.forward(0, x.view(B), true, 1.0f / static_cast<float>(m.builder().target_elements(B, 1)));
  m.backward(0);
  for (int d = 0; d < kD; ++d) {
    float* w = m.params() + m.table().offset(0) + d;
    const float saved = *w, h = 1e-2f;
    *w = saved + h;
    const double lp = m.forward(0, x.view(B), false, 0.0f) / B;
    *w = saved - h;
    const double lm = m.forward(0, x.view(B), false, 0.0f) / B;
    *w = saved;
    EXPECT_NEAR(m.grads()[m.table().offset(0) + d], (lp - lm) / (2 * h), 1e-3) << "d = " << d;
  }
}

TEST(SequentialModel, BuffersTrainAsTheLayerSaysAndRoundTripThroughCheckpoints) {
  testing::TmpDir dir;
  auto be = make_cpu_backend();
  SequentialModel m(std::make_shared<ToyImages>(), *be);
  m.init_weights(1);
  const int B = 4;
  m.reserve(B, 1, 1);
  OptimConfig oc;
  AdamW opt(*be, m.table(), oc);
  std::vector<double> mean(kD, 0.0);  // the running mean, computed here independently
  for (int step = 1; step <= 5; ++step) {
    const Batch x = batch(B, 100 + step);
    m.zero_grads();
    m.forward(0, x.view(B), true, 1.0f / B);
    m.backward(0);
    opt.step(m.params(), m.grads(), 1e-2, 1.0f, step);
    for (int d = 0; d < kD; ++d) {
      double s = 0;
      for (int b = 0; b < B; ++b) s += x.images[b * kD + d];
      mean[d] = 0.9 * mean[d] + 0.1 * s / B;
    }
  }
  for (int d = 0; d < kD; ++d) EXPECT_NEAR(m.buffers()[d], mean[d], 1e-6);
  EXPECT_NE(m.params()[m.table().offset(0)], 1.0f);  // the parameters did train
  // Checkpoint: saved as buffers/<name>, restored into a fresh model.
  Config cfg;
  cfg.checkpoint.dir = dir.path();
  HostTrainState host(m.table(), m.flat_size());
  const SaveResult r = save_train_state(cfg, m, opt, host, 5, 1e-2);
  CheckpointReader reader(r.path);
  ASSERT_NE(reader.find("buffers/scale.running_mean"), nullptr);
  EXPECT_EQ(reader.find("params/scale.running_mean"), nullptr);
  SequentialModel fresh(std::make_shared<ToyImages>(), *be);
  fresh.init_weights(1);
  AdamW opt2(*be, fresh.table(), oc);
  HostTrainState host2(fresh.table(), fresh.flat_size());
  read_train_state(r.path, fresh.table(), host2);
  restore_train_state(host2, fresh, opt2);
  for (int d = 0; d < kD; ++d) {
    EXPECT_EQ(fresh.buffers()[d], m.buffers()[d]);
    EXPECT_EQ(fresh.params()[fresh.table().offset(0) + d], m.params()[m.table().offset(0) + d]);
  }
}

}  // namespace
}  // namespace baton
