// Measured profiles in the planner (plan/profile.h, docs/planner.md "Measured profiles"): doubled
// measured times double the predicted compute time; a profile equal to the analytical model
// reproduces the analytical prediction at other micro-batches, tp and recomputation (so the
// scaling rule is the analytical one); profiles that do not describe the model are errors.
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "plan/profile.h"
#include "plan/ptdp.h"

namespace baton::plan {
namespace {

const GptShape kShape{4, 4, 256, 128, 8192};

PtdpProblem problem(int gpus) {
  PtdpProblem pb;
  pb.shape = kShape;
  pb.global_batch = 16;
  pb.dtype = "fp32";
  pb.act_layout = ActLayout::BATON_FP32;
  pb.cluster = load_cluster_string(fmt::format("inter_node_gbs = 25\n[[nodes]]\ndevice = 'A100'\n"
                                               "gpus = {}\nintra_node_gbs = 200\n",
                                               gpus),
                                   "c.toml");
  return pb;
}

// The profile `baton profile` would write if the device behaved exactly as the analytical model.
MeasuredProfile analytical_profile(int micro_batch, double time_scale = 1) {
  GptOptions o;
  o.micro_batch = micro_batch;
  o.layout = ActLayout::BATON_FP32;
  const ModelDesc md = gpt_desc(kShape, o);
  const DeviceType& dev = find_device("A100");
  MeasuredProfile p;
  p.source = "test.json";
  p.device = "test";
  p.micro_batch = micro_batch;
  p.seq_len = kShape.seq_len;
  for (const auto& l : md.layers) {
    const LayerTime t = layer_time(l, dev, "fp32", Assumptions{});
    p.layers.push_back({l.name, t.fwd * time_scale, t.bwd * time_scale, l.params, l.stash_bytes,
                        l.out_bytes, l.work_bytes});
  }
  return p;
}

TEST(PlanProfile, DoubledTimesDoubleTheComputeTime) {
  for (int pp : {1, 2}) {
    PtdpProblem pb = problem(pp);
    const Layout l{1, pp, 1, 1, 2, "1f1b", "none"};
    pb.profile = std::make_shared<MeasuredProfile>(analytical_profile(2));
    const Prediction once = evaluate(pb, l, true);
    pb.profile = std::make_shared<MeasuredProfile>(analytical_profile(2, 2.0));
    const Prediction twice = evaluate(pb, l, true);
    EXPECT_NEAR(twice.compute_s / once.compute_s, 2.0, 1e-12) << "pp " << pp;
    if (pp == 1) {  // no sends: the whole pipeline time is compute
      EXPECT_NEAR(twice.pipeline_s / once.pipeline_s, 2.0, 1e-12);
    } else {
      EXPECT_GT(twice.pipeline_s, 1.9 * once.pipeline_s);
    }
    // Memory does not depend on the times.
    EXPECT_EQ(twice.memory_gb, once.memory_gb);
  }
}

// measured × analytical(plan)/analytical(profile): with an analytical "measurement" the planner
// must predict what it predicts without a profile, for any micro-batch, tp and recomputation.
TEST(PlanProfile, ScalingFollowsTheAnalyticalRatios) {
  for (int prof_mb : {1, 4}) {
    for (const Layout& l : {Layout{1, 1, 1, 1, 2, "1f1b", "none"}, Layout{2, 2, 1, 1, 1, "1f1b", "full"},
                            Layout{4, 1, 1, 1, 8, "1f1b", "selective"}}) {
      PtdpProblem pb = problem(l.tp * l.pp);
      const Prediction analytic = evaluate(pb, l, true);
      pb.profile = std::make_shared<MeasuredProfile>(analytical_profile(prof_mb));
      const Prediction measured = evaluate(pb, l, true);
      EXPECT_NEAR(measured.step_time_s / analytic.step_time_s, 1.0, 1e-9)
          << "profile mb " << prof_mb << " tp " << l.tp << " " << l.recompute;
      ASSERT_EQ(measured.memory_gb.size(), analytic.memory_gb.size());
      for (size_t r = 0; r < analytic.memory_gb.size(); ++r)
        EXPECT_NEAR(measured.memory_gb[r] / analytic.memory_gb[r], 1.0, 1e-9);
    }
  }
  // A slower measured embedding changes the prediction (the profile is used, not ignored).
  PtdpProblem pb = problem(1);
  const Layout l{1, 1, 1, 1, 2, "1f1b", "none"};
  MeasuredProfile p = analytical_profile(2);
  const double base = evaluate(pb, l, true).compute_s;
  p.layers[0].fwd_s += 0.5;
  pb.profile = std::make_shared<MeasuredProfile>(p);
  EXPECT_NEAR(evaluate(pb, l, true).compute_s - base, 0.5 * 16 / 2, 1e-9);  // 8 micro-batches
}

void expect_error(const std::function<void()>& f, const std::string& what) {
  try {
    f();
    ADD_FAILURE() << "no error, wanted " << what;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    EXPECT_FALSE(e.hint().empty());
  }
}

TEST(PlanProfile, ProfilesThatDoNotFitAreErrors) {
  const Layout l{1, 1, 1, 1, 2, "1f1b", "none"};
  PtdpProblem pb = problem(1);
  MeasuredProfile p = analytical_profile(2);
  p.layers.pop_back();
  pb.profile = std::make_shared<MeasuredProfile>(p);
  expect_error([&] { evaluate(pb, l); }, "has 5 layers; the config's GPT has 6");
  p = analytical_profile(2);
  p.seq_len = 64;
  pb.profile = std::make_shared<MeasuredProfile>(p);
  expect_error([&] { evaluate(pb, l); }, "seq_len 64, the config has 128");
  pb.profile = std::make_shared<MeasuredProfile>(analytical_profile(2));
  pb.dtype = "bf16";
  pb.act_layout = ActLayout::MEGATRON;
  expect_error([&] { evaluate(pb, l); }, "measured in fp32, the config computes in bf16");
  expect_error([] { parse_profile("{", "p.json"); }, "not JSON");
  expect_error([] { parse_profile(R"({"micro_batch": 1, "seq_len": 8, "layers": [{"name": "x"}]})", "p.json"); },
               "lacks a field");
  expect_error([] { load_profile("/nonexistent/p.json"); }, "cannot read profile");
}

TEST(PlanProfile, ParsesWhatBatonProfileWrites) {
  const MeasuredProfile p = parse_profile(R"({"device": "cpu", "micro_batch": 2, "seq_len": 16,
    "dtype": "fp32", "layers": [{"name": "embedding", "forward_ms": 1.5, "backward_ms": 3,
    "params": 10, "weight_bytes": 40, "stash_bytes": 128, "output_bytes": 256,
    "workspace_bytes": 8}]})",
                                          "p.json");
  ASSERT_EQ(p.layers.size(), 1u);
  EXPECT_DOUBLE_EQ(p.layers[0].fwd_s, 1.5e-3);
  EXPECT_DOUBLE_EQ(p.layers[0].bwd_s, 3e-3);
  EXPECT_EQ(p.layers[0].stash_bytes, 128);
  EXPECT_EQ(p.layers[0].out_bytes, 256);
  EXPECT_EQ(p.micro_batch, 2);
  EXPECT_EQ(p.seq_len, 16);
}

}  // namespace
}  // namespace baton::plan
