// The CUDA backend in bf16 (precision.compute = "bf16") end to end on a small GPT: against the
// CPU's bf16 emulation (same rounding points, backend.h "Precision"), against CUDA fp32 over a
// 50-step loss curve, determinism, and no cudaMalloc after warm-up; and GPT-2 124M's first two
// losses against the CPU emulation. Both attention paths: head
// size 64 (flash attention, state = logsumexp) and 12 (no flash kernel: the fp32 materialised
// attention through fp32 copies). Label `gpu`; skips with "skipped: no CUDA device".
//
// Tolerances, and why:
//   loss vs CPU emulation   1e-2 rel   same roundings, different summation orders (cuBLASLt,
//                                      tiled flash softmax): a sum that lands near a bf16 rounding
//                                      boundary rounds the other way (2^-8 relative) and the change
//                                      propagates; per-token losses average it out.
//   grads vs CPU emulation  5e-2 rel   the same, compounded through the backward (norm-wise).
//   curve vs CUDA fp32      2e-2 each step, 1e-2 at the end (docs/cuda.md, as the CPU test).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "../support/gpu_test.h"
#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "core/rng.h"
#include "model/gpt.h"
#include "optim/adamw.h"
#include "../support/markov_tokens.h"

namespace baton {
namespace {

GptDims dims(int head_size) {
  GptDims d;
  d.n_layer = 2;
  d.n_head = 4;
  d.d_model = 4 * head_size;
  d.seq_len = 128;
  d.vocab = 300;
  d.vocab_padded = pad_vocab(d.vocab);
  return d;
}

struct TrainRun {
  std::vector<double> losses;
  std::vector<float> grads;  // after the first step's backward
  int mallocs_after_warmup = -1, mallocs_end = -1;
};

TrainRun train(Backend& be, const GptDims& d, int steps, bool cuda, int B = 4) {
  SequentialModel m(make_gpt(d), be);
  m.init_weights(5);
  const int T = d.seq_len;
  m.reserve(B, T, 1);
  OptimConfig oc;
  AdamW opt(be, m.table(), oc);
  TrainRun r;
  std::vector<int32_t> x, y;
  for (int step = 1; step <= steps; ++step) {
    test::markov_batch(step, B, T, d.vocab, x, y);
    m.zero_grads();
    r.losses.push_back(m.forward(0, MicroBatch{.B = B, .T = T, .tokens = x.data(), .targets = y.data()}, true, 1.0f / (B * T)) / (B * T));
    m.backward(0);
    if (step == 1) {
      r.grads.resize(m.flat_size());
      be.to_host(r.grads.data(), m.grads(), r.grads.size() * sizeof(float));
    }
    be.sum_squares(m.grads(), m.flat_size());
    opt.step(m.params(), m.grads(), 3e-3, 1.0f, step);
    m.refresh_compute_params();
    if (cuda && step == 1) r.mallocs_after_warmup = cuda_memory_stats(be).device_mallocs;
  }
  if (cuda) r.mallocs_end = cuda_memory_stats(be).device_mallocs;
  return r;
}

class CudaBf16 : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    BATON_GPU_TEST_OR_SKIP();
  }
};

TEST_P(CudaBf16, MatchesCpuEmulation) {
  const GptDims d = dims(GetParam());
  auto cpu = make_cpu_backend(DType::BF16), gpu = make_cuda_backend(0, DType::BF16);
  const TrainRun c = train(*cpu, d, 3, false), g = train(*gpu, d, 3, true);
  for (size_t i = 0; i < c.losses.size(); ++i)
    EXPECT_NEAR(g.losses[i], c.losses[i], 1e-2 * c.losses[i]) << "step " << i + 1;
  SequentialModel layout(make_gpt(d), *cpu);
  for (int i = 0; i < layout.table().size(); ++i) {
    const float* a = layout.table().at(c.grads.data(), i);
    const float* b = layout.table().at(g.grads.data(), i);
    double diff = 0, norm = 0;
    for (size_t k = 0; k < layout.table().numel(i); ++k) {
      diff += double(a[k] - b[k]) * (a[k] - b[k]);
      norm += double(a[k]) * a[k];
    }
    if (norm > 0) {
      EXPECT_LT(std::sqrt(diff / norm), 5e-2) << layout.table().spec(i).name;
    }
  }
}

TEST_P(CudaBf16, FollowsFp32For50StepsDeterministicallyWithoutMallocs) {
  const GptDims d = dims(GetParam());
  auto g32 = make_cuda_backend(0, DType::F32), g16 = make_cuda_backend(0, DType::BF16);
  const TrainRun f = train(*g32, d, 50, true), b = train(*g16, d, 50, true);
  double worst = 0;
  for (size_t i = 0; i < f.losses.size(); ++i) {
    const double rel = std::fabs(b.losses[i] - f.losses[i]) / f.losses[i];
    worst = std::max(worst, rel);
    EXPECT_LT(rel, 2e-2) << "step " << i + 1;
  }
  EXPECT_LT(std::fabs(b.losses.back() - f.losses.back()) / f.losses.back(), 1e-2);
  EXPECT_LT(b.losses.back(), 0.75 * b.losses.front());
  std::printf("HS %d: bf16 vs fp32 on CUDA over 50 steps: worst %.2e\n", GetParam(), worst);
  EXPECT_EQ(b.mallocs_end, b.mallocs_after_warmup) << "cudaMalloc after the first step";
  auto again = make_cuda_backend(0, DType::BF16);
  const TrainRun b2 = train(*again, d, 5, true);
  for (size_t i = 0; i < b2.losses.size(); ++i) EXPECT_EQ(b2.losses[i], b.losses[i]) << "step " << i + 1;
}

// 64: flash attention; 12: no flash kernel for that head size (the fp32 fallback).
INSTANTIATE_TEST_SUITE_P(HeadSize, CudaBf16, ::testing::Values(64, 12));

// GPT-2 124M itself (issue 14 A5: 12 layers of 768, 12 heads, T 1024, the padded 50304 vocabulary),
// one sequence a step, two steps: the loss before and after one AdamW update against the CPU's bf16
// emulation, with the small model's tolerance. The real shapes take the paths the small model does
// not (cuBLASLt's heuristics at K = 768/3072, the head GEMM at V = 50304, flash attention's T-tiling
// at 1024). The CPU side takes ~1.5 TFLOP (seconds to a minute on a GPU node's cores).
TEST(CudaBf16Gpt2, TwoStepsOf124MAgainstCpuEmulation) {
  BATON_GPU_TEST_OR_SKIP();
  const GptDims d = make_gpt_dims(12, 12, 768, 1024, 50257);
  ASSERT_EQ(d.vocab_padded, 50304);
  auto cpu = make_cpu_backend(DType::BF16), gpu = make_cuda_backend(0, DType::BF16);
  const TrainRun c = train(*cpu, d, 2, false, 1), g = train(*gpu, d, 2, true, 1);
  for (size_t i = 0; i < c.losses.size(); ++i) {
    EXPECT_NEAR(g.losses[i], c.losses[i], 1e-2 * c.losses[i]) << "step " << i + 1;
    std::printf("124M step %zu: loss cuda %.6f, cpu bf16 emulation %.6f\n", i + 1, g.losses[i], c.losses[i]);
  }
}

}  // namespace
}  // namespace baton
