// LR schedule shape, gradient clipping and the PTD-P FLOPs formula (checked against a count of
// every matmul of a GPT layer, done independently here).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/backend.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "model/gpt.h"
#include "train/metrics.h"

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

}  // namespace
}  // namespace baton
