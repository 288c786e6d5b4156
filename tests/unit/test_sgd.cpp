// SGD (optim/sgd.h) against an independent double-precision implementation of PyTorch's
// torch.optim.SGD algorithm (dampening 0; buf starts at the first gradient) over several steps:
// plain, momentum, Nesterov, L2 decay added to the gradient, decoupled decay (SGDW), gradient
// scaling; weight decay only where the ParamSpec says `decay` unless optim.decay_norm_and_bias;
// make_optimizer builds the configured kind and their checkpoint state groups.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "core/rng.h"
#include "optim/adamw.h"
#include "optim/sgd.h"

namespace baton {
namespace {

std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.0f) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = scale * static_cast<float>(rng.normal());
  return v;
}

// PyTorch's SGD step (torch/optim/sgd.py, _single_tensor_sgd) in double, plus SGDW's decoupled
// decay w -= lr * wd * w.
void reference(std::vector<double>& w, std::vector<double>& buf, bool& first, const std::vector<float>& grad,
               const OptimConfig& o, double lr, double scale, bool decays) {
  const double wd = decays ? o.weight_decay : 0.0;
  for (size_t i = 0; i < w.size(); ++i) {
    double g = grad[i] * scale;
    if (o.weight_decay_mode == "l2") g += wd * w[i];
    if (o.momentum != 0) {
      buf[i] = first ? g : o.momentum * buf[i] + g;
      g = o.nesterov ? g + o.momentum * buf[i] : buf[i];
    }
    if (o.weight_decay_mode == "decoupled") w[i] -= lr * wd * w[i];
    w[i] -= lr * g;
  }
  first = false;
}

void check(const OptimConfig& o, bool decays, const char* what) {
  SCOPED_TRACE(what);
  const size_t n = 777;
  auto be = make_cpu_backend();
  std::vector<float> w = randn(n, 1);
  std::vector<double> ref(w.begin(), w.end()), buf(n, 0.0);
  bool first = true;
  Sgd sgd(*be, {{.flat = 0, .state = 0, .n = n, .decay = decays}}, n, o);
  for (int t = 1; t <= 6; ++t) {
    const std::vector<float> g = randn(n, 100 + t);
    const double lr = 0.05 / t, scale = t % 2 ? 1.0 : 0.5;
    sgd.step(w.data(), g.data(), lr, static_cast<float>(scale), t);
    reference(ref, buf, first, g, o, lr, scale, decays || o.decay_norm_and_bias);
  }
  double worst = 0;
  for (size_t i = 0; i < n; ++i) worst = std::max(worst, std::abs(w[i] - ref[i]) / (1e-3 + std::abs(ref[i])));
  EXPECT_LT(worst, 5e-5);  // fp32 against double over 6 steps: measured up to 1.4e-5
}

OptimConfig sgd_config(double momentum, bool nesterov, const char* mode, double wd) {
  OptimConfig o;
  o.kind = "sgd";
  o.momentum = momentum;
  o.nesterov = nesterov;
  o.weight_decay_mode = mode;
  o.weight_decay = wd;
  return o;
}

TEST(Sgd, MatchesPyTorchsAlgorithm) {
  check(sgd_config(0.0, false, "decoupled", 0.0), true, "plain");
  check(sgd_config(0.9, false, "decoupled", 0.0), true, "momentum");
  check(sgd_config(0.9, true, "decoupled", 0.0), true, "nesterov");
  check(sgd_config(0.9, false, "l2", 5e-4), true, "momentum + L2");
  check(sgd_config(0.9, true, "l2", 5e-4), true, "nesterov + L2");
  check(sgd_config(0.9, false, "decoupled", 0.05), true, "momentum + decoupled");
  check(sgd_config(0.9, false, "l2", 5e-4), false, "no decay on a norm/bias segment");
  OptimConfig all = sgd_config(0.9, false, "l2", 5e-4);
  all.decay_norm_and_bias = true;
  check(all, false, "decay_norm_and_bias decays it too");
}

// The decay switch is real: the same run with and without decay on a non-decay segment differs.
TEST(Sgd, NormAndBiasDecayIsConfigurable) {
  auto be = make_cpu_backend();
  const size_t n = 64;
  const std::vector<float> g = randn(n, 7);
  OptimConfig o = sgd_config(0.9, false, "decoupled", 0.1);
  std::vector<float> a = randn(n, 3), b = a;
  Sgd off(*be, {{.flat = 0, .state = 0, .n = n, .decay = false}}, n, o);
  o.decay_norm_and_bias = true;
  Sgd on(*be, {{.flat = 0, .state = 0, .n = n, .decay = false}}, n, o);
  off.step(a.data(), g.data(), 0.1, 1.0f, 1);
  on.step(b.data(), g.data(), 0.1, 1.0f, 1);
  EXPECT_NE(a, b);
}

TEST(Optimizer, MakeOptimizerAndStateGroups) {
  auto be = make_cpu_backend();
  const std::vector<UpdateSegment> segs = {{.flat = 0, .state = 0, .n = 8, .decay = true}};
  OptimConfig o;
  auto adam = make_optimizer(*be, segs, 8, o);
  ASSERT_NE(dynamic_cast<AdamW*>(adam.get()), nullptr);
  ASSERT_EQ(adam->state().size(), 2u);
  EXPECT_STREQ(adam->state()[0].group, "optim/m/");
  EXPECT_STREQ(adam->state()[1].group, "optim/v/");
  o = sgd_config(0.9, false, "decoupled", 0.0);
  auto sgd = make_optimizer(*be, segs, 8, o);
  ASSERT_NE(dynamic_cast<Sgd*>(sgd.get()), nullptr);
  ASSERT_EQ(sgd->state().size(), 1u);
  EXPECT_STREQ(sgd->state()[0].group, "optim/momentum/");
  o.momentum = 0;
  EXPECT_TRUE(make_optimizer(*be, segs, 8, o)->state().empty());  // no momentum, no state
  o.kind = "lion";
  EXPECT_THROW(make_optimizer(*be, segs, 8, o), Error);
}

}  // namespace
}  // namespace baton
