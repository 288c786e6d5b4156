// LR schedule shape, gradient clipping and the PTD-P FLOPs formula (checked against a count of
// every matmul of a GPT layer, done independently here).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/backend.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "config/config.h"
#include "model/gpt.h"
#include "train/loop/session.h"
#include "train/observe/metrics.h"

namespace baton {
namespace {

TEST(LrSchedule, WarmupThenCosineToMinLr) {
  LrSchedule s{.lr = 1.0, .min_lr = 0.1, .warmup_steps = 10, .total_steps = 110, .decay = "cosine"};
  EXPECT_DOUBLE_EQ(s.at(0), 0.1);   // (0+1)/10
  EXPECT_DOUBLE_EQ(s.at(9), 1.0);
  EXPECT_DOUBLE_EQ(s.at(10), 1.0);  // decay starts at lr
  EXPECT_NEAR(s.at(60), 0.55, 1e-12);  // halfway: (lr + min_lr) / 2
  EXPECT_NEAR(s.at(110), 0.1, 1e-12);
  EXPECT_NEAR(s.at(500), 0.1, 1e-12);  // clamped after the end
  for (int64_t t = 11; t < 110; ++t) EXPECT_LE(s.at(t), s.at(t - 1));
}

// "step": warm-up, then lr · gamma^⌊(t − warmup) / step_size⌋, never below min_lr.
TEST(LrSchedule, StepDecay) {
  LrSchedule s{.lr = 0.4, .min_lr = 0.001, .warmup_steps = 2, .total_steps = 100, .decay = "step",
               .step_size = 10, .step_gamma = 0.1};
  EXPECT_DOUBLE_EQ(s.at(0), 0.2);
  EXPECT_DOUBLE_EQ(s.at(2), 0.4);
  EXPECT_DOUBLE_EQ(s.at(11), 0.4);
  EXPECT_NEAR(s.at(12), 0.04, 1e-15);
  EXPECT_NEAR(s.at(22), 0.004, 1e-15);
  EXPECT_DOUBLE_EQ(s.at(32), 0.001);  // 0.0004 floored at min_lr
}

TEST(LrSchedule, LinearAndConstant) {
  LrSchedule lin{.lr = 1.0, .min_lr = 0.0, .warmup_steps = 0, .total_steps = 100, .decay = "linear"};
  EXPECT_NEAR(lin.at(25), 0.75, 1e-12);
  LrSchedule c{.lr = 0.5, .min_lr = 0.0, .warmup_steps = 4, .total_steps = 100, .decay = "constant"};
  EXPECT_DOUBLE_EQ(c.at(1), 0.25);
  EXPECT_DOUBLE_EQ(c.at(99), 0.5);
}

TEST(GradClip, ScalesToMaxNorm) {
  auto be = make_cpu_backend();
  std::vector<float> g = {3.0f, 4.0f};  // norm 5
  ClipResult r = clip_by_global_norm(*be, g.data(), g.size(), 1.0);
  EXPECT_NEAR(r.norm, 5.0, 1e-12);
  EXPECT_NEAR(r.scale, 0.2, 1e-6);
  EXPECT_EQ(clip_by_global_norm(*be, g.data(), g.size(), 10.0).scale, 1.0f);
  EXPECT_EQ(clip_by_global_norm(*be, g.data(), g.size(), 0.0).scale, 1.0f);
}

// Forward FLOPs per token of one GPT layer, matmul by matmul (2 FLOPs per multiply-add):
// QKV 2·h·3h, attention scores 2·s·h, attention-weighted values 2·s·h, projection 2·h·h,
// MLP up 2·h·4h, MLP down 2·4h·h; the LM head 2·h·V. Backward costs twice the forward.
double counted_flops(int64_t B, int s, int l, int h, int V) {
  const double hh = h;
  const double per_token_layer = 2 * hh * 3 * hh + 2.0 * s * hh + 2.0 * s * hh + 2 * hh * hh +
                                 2 * hh * 4 * hh + 2 * 4 * hh * hh;
  const double per_token = l * per_token_layer + 2 * hh * V;
  return 3.0 * per_token * double(B) * s;
}

TEST(Flops, MatchesPerMatmulCount) {
  struct Shape { int64_t B; int s, l, h, V; };
  for (Shape sh : {Shape{8, 1024, 12, 768, 50304}, Shape{512, 2048, 24, 2304, 51200},
                   Shape{16, 128, 4, 256, 8192}}) {
    const double f = gpt_model_flops_per_step(sh.B, sh.s, sh.l, sh.h, sh.V);
    EXPECT_NEAR(f / counted_flops(sh.B, sh.s, sh.l, sh.h, sh.V), 1.0, 1e-12);
  }
  // Full recomputation adds one more forward of the layers (4x instead of 3x), not of the head.
  const double hw = gpt_hardware_flops_full_recompute(8, 1024, 12, 768, 50304);
  const double layers_fwd = counted_flops(8, 1024, 12, 768, 0) / 3.0;
  EXPECT_NEAR(hw / (counted_flops(8, 1024, 12, 768, 50304) + layers_fwd), 1.0, 1e-12);
}

// llm.c's count (issue 14 A9): N is every parameter of the model baton builds (a one-rank model's
// table, padding excluded) and GPT-2 124M's is llm.c's 124,475,904; 6N + 6·L·C·T per token.
TEST(Flops, SixNCountMatchesTheModelsParameters) {
  EXPECT_EQ(gpt_parameter_count(1024, 12, 768, 50304), 124475904.0);
  const Config cfg = load_config_string("", "x", {"model.n_layer=3", "model.d_model=48", "model.n_head=4",
                                                  "model.vocab_size=100", "model.seq_len=32"});
  const std::shared_ptr<const ModelBuilder> builder = model_builder(cfg, 100);
  const std::unique_ptr<Backend> be = make_cpu_backend();
  ParamTable table;
  for (int l = 0; l < builder->num_layers(); ++l)
    builder->make_layer(l, TensorParallel{}, *be, Recompute::NONE)->add_params(table);
  const GptDims& d = gpt_dims_of(*builder);
  EXPECT_EQ(gpt_parameter_count(32, 3, 48, d.vocab_padded), double(table.count()));
  EXPECT_EQ(builder->flops_per_token_6n(), 6.0 * double(table.count()) + 6.0 * 3 * 48 * 32);
}

}  // namespace
}  // namespace baton
