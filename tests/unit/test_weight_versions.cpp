// The weight stash (train/loop/weight_versions.h) under fp32 and bf16 compute: a selected version is
// computed with exactly as a model whose masters are that version computes after
// refresh_compute_params() — in bf16 its own compute copy, re-derived after the version changed
// (an update into next(), a rebase through for_each_from(), at once for the selected version) —
// and publish_latest() leaves the model's masters and compute copy at the latest version.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/backend.h"
#include "core/rng.h"
#include "model/gpt.h"
#include "model/sequential_model.h"
#include "train/loop/weight_versions.h"

namespace baton {
namespace {

constexpr int kB = 2, kT = 8, kVocab = 37;

GptDims dims() { return make_gpt_dims(2, 2, 16, kT, kVocab); }

struct Batch {
  std::vector<int32_t> x, y;
  Batch() : x(kB * kT), y(kB * kT) {
    Rng rng(11);
    for (auto& t : x) t = static_cast<int32_t>(rng.below(kVocab));
    for (auto& t : y) t = static_cast<int32_t>(rng.below(kVocab));
  }
  MicroBatch mb() const { return {.B = kB, .T = kT, .tokens = x.data(), .targets = y.data()}; }
};

// The loss sum of a model whose masters are `w` (a fresh model: its compute copy derived as training
// derives it).
double reference_loss(Backend& be, const std::vector<float>& w, const Batch& b) {
  SequentialModel m(make_gpt(dims()), be);
  m.reserve(kB, kT, 1);
  std::copy(w.begin(), w.end(), m.params());
  m.refresh_compute_params();
  return m.forward(0, b.mb(), false, 0.0f);
}

// A change of every weight, different per call (the optimizer's stand-in).
void perturb(float* w, size_t n, float by) {
  for (size_t i = 0; i < n; ++i) w[i] += by * std::sin(float(i) * 0.37f + by * 100.0f);
}

class WeightVersionsTest : public ::testing::TestWithParam<DType> {};

TEST_P(WeightVersionsTest, EachVersionComputesAsItsOwnModel) {
  auto be = make_cpu_backend(GetParam());
  SequentialModel m(make_gpt(dims()), *be);
  m.init_weights(5);
  m.refresh_compute_params();
  m.reserve(kB, kT, 1);
  const size_t n = m.flat_size();
  const Batch b;
  std::vector<std::vector<float>> version{{m.params(), m.params() + n}};

  WeightVersions wv(m);
  wv.start(3);
  for (int v = 1; v <= 2; ++v) {
    // Select the previous version first, so that a compute copy that next() failed to mark stale
    // would show below.
    wv.select(v - 1);
    (void)m.forward(0, b.mb(), false, 0.0f);
    float* w = wv.next(v);
    perturb(w, n, 0.01f * float(v));
    version.emplace_back(w, w + n);
  }
  std::vector<double> loss(3);
  for (int v : {2, 0, 1, 2}) {  // any order, a version again
    wv.select(v);
    loss[v] = m.forward(0, b.mb(), false, 0.0f);
    EXPECT_EQ(loss[v], reference_loss(*be, version[v], b)) << "version " << v;
  }
  EXPECT_NE(loss[0], loss[1]);
  EXPECT_NE(loss[1], loss[2]);

  // A rebase (WSP's merge) changes versions 1 and 2 in place: they compute with the new weights.
  wv.for_each_from(1, [&](int v, float* w) {
    perturb(w, n, 0.02f);
    version[v].assign(w, w + n);
  });
  for (int v : {1, 2}) {
    wv.select(v);
    EXPECT_EQ(m.forward(0, b.mb(), false, 0.0f), reference_loss(*be, version[v], b)) << "rebased version " << v;
  }
  wv.select(0);  // untouched by the rebase
  EXPECT_EQ(m.forward(0, b.mb(), false, 0.0f), loss[0]);
  // WSP merges inside a forward, after the executor selected its version: the selected version
  // computes with the rebased weights without being selected again.
  wv.select(2);
  wv.for_each_from(2, [&](int v, float* w) {
    perturb(w, n, 0.025f);
    version[v].assign(w, w + n);
  });
  EXPECT_EQ(m.forward(0, b.mb(), false, 0.0f), reference_loss(*be, version[2], b)) << "rebased while selected";

  // Version 3 reuses version 0's slot (a ring of 3): computed with version 3, not 0's leftovers.
  float* w3 = wv.next(3);
  perturb(w3, n, 0.03f);
  version.emplace_back(w3, w3 + n);
  wv.select(3);
  EXPECT_EQ(m.forward(0, b.mb(), false, 0.0f), reference_loss(*be, version[3], b));

  // Published: the model's own masters and compute weights are version 3's.
  wv.publish_latest();
  EXPECT_EQ(std::vector<float>(m.params(), m.params() + n), version[3]);
  EXPECT_EQ(m.forward(0, b.mb(), false, 0.0f), reference_loss(*be, version[3], b));
}

INSTANTIATE_TEST_SUITE_P(Compute, WeightVersionsTest, ::testing::Values(DType::F32, DType::BF16),
                         [](const ::testing::TestParamInfo<DType>& i) {
                           return std::string(i.param == DType::F32 ? "fp32" : "bf16");
                         });

}  // namespace
}  // namespace baton
