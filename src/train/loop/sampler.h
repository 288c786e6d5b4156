// Autoregressive sampling from a GPT: temperature and top-k over the last position's logits,
// recomputing the context each token (no KV cache; the models sampled here are small).
#pragma once
#include <cstdint>
#include <vector>

#include "model/sequential_model.h"

namespace baton {

struct SampleOptions {
  int tokens = 64;
  double temperature = 0.8;  // 0 = greedy
  int top_k = 40;            // 0 = whole vocabulary
  uint64_t seed = 1;
  int32_t stop_token = -1;   // stop early when sampled (e.g. end of text); -1 = never
};

// Returns the generated continuation (without the prompt). `prompt` must not be empty. `model`: a
// whole GPT (model/gpt.h) without tensor parallelism.
std::vector<int32_t> sample_tokens(SequentialModel& model, const std::vector<int32_t>& prompt,
                                   const SampleOptions& opts);

}  // namespace baton
