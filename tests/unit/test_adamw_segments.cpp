// The multi-tensor AdamW step (Backend::adamw_step_segments, issue 20 A3): the optimizer makes one
// call per step for all its segments; the Backend's default (the CPU's) is adamw_step per segment,
// so the optimizer's results are those of its former per-segment loop bit for bit; the op-time
// table counts it as one op moving 28 bytes per element. (The CUDA one-launch version against the
// per-segment kernel: tests/gpu/test_cuda_ops.cpp, run emulated in CI.)
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "backend/op_timed_backend.h"
#include "core/rng.h"
#include "optim/adamw.h"

namespace baton {
namespace {

std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.0f) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = scale * rng.normal();
  return v;
}

// ZeRO-1-like pieces: gaps in the flat buffer, state back to back, decay on some.
const std::vector<UpdateSegment> kSegs = {{.flat = 5, .state = 0, .n = 1000, .decay = true},
                                          {.flat = 1010, .state = 1000, .n = 0, .decay = true},
                                          {.flat = 1010, .state = 1000, .n = 4097, .decay = false},
                                          {.flat = 6000, .state = 5097, .n = 33, .decay = true}};
constexpr size_t kFlat = 6040, kState = 5130;

TEST(AdamWSegments, OptimizerStepIsThePerSegmentLoopBitForBit) {
  for (bool decay_all : {false, true}) {
    OptimConfig cfg;
    cfg.weight_decay = 0.1;
    cfg.decay_norm_and_bias = decay_all;
    auto be = make_cpu_backend();
    const std::vector<float> p0 = randn(kFlat, 1), g = randn(kFlat, 2, 0.01f);
    std::vector<float> p = p0, q = p0, m(kState, 0.0f), v(kState, 0.0f);
    AdamW opt(*be, kSegs, kState, cfg);
    for (int64_t step = 1; step <= 3; ++step) {
      opt.step(p.data(), g.data(), 1e-3 * double(step), 0.5f, step);
      AdamWArgs a;  // the optimizer's former loop
      a.lr = static_cast<float>(1e-3 * double(step));
      a.beta1 = static_cast<float>(cfg.beta1);
      a.beta2 = static_cast<float>(cfg.beta2);
      a.eps = static_cast<float>(cfg.eps);
      a.step = step;
      a.grad_scale = 0.5f;
      for (const UpdateSegment& s : kSegs) {
        a.weight_decay = s.decay || decay_all ? 0.1f : 0.0f;
        be->adamw_step(q.data() + s.flat, g.data() + s.flat, m.data() + s.state, v.data() + s.state, s.n, a);
      }
    }
    ASSERT_EQ(p, q) << "decay_norm_and_bias " << decay_all;
    EXPECT_NE(p, p0);
    EXPECT_EQ(std::vector<float>(opt.m(), opt.m() + kState), m);
    EXPECT_EQ(std::vector<float>(opt.v(), opt.v() + kState), v);
    EXPECT_EQ(p[0], p0[0]);  // the gap before the first segment
  }
}

TEST(AdamWSegments, OptimizerMakesOneTimedCallPerStep) {
  OpTimedBackend be(make_cpu_backend());
  std::vector<float> p = randn(kFlat, 3), g = randn(kFlat, 4);
  AdamW opt(be, kSegs, kState, OptimConfig{});
  for (int64_t step = 1; step <= 2; ++step) opt.step(p.data(), g.data(), 1e-3, 1.0f, step);
  std::map<std::string, OpTimedBackend::Row> by;
  for (const auto& r : be.rows()) by[r.op] = r;
  ASSERT_EQ(by.count("adamw_step_segments"), 1u);
  EXPECT_EQ(by.count("adamw_step"), 0u);  // the inner backend's per-segment calls are not timed twice
  EXPECT_EQ(by["adamw_step_segments"].calls, 2);
  // Per element: read param, grad, m, v and write param, m, v (7 floats), as adamw_step counts.
  EXPECT_EQ(by["adamw_step_segments"].bytes, 2 * 28.0 * (1000 + 4097 + 33));
}

}  // namespace
}  // namespace baton
