#include "train/loop/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"
#include "model/gpt.h"

namespace baton {

std::vector<int32_t> sample_tokens(SequentialModel& model, const std::vector<int32_t>& prompt,
                                   const SampleOptions& opts) {
  BATON_REQUIRE(!prompt.empty(), "the prompt encodes to no tokens", "give a non-empty --prompt");
  const GptDims& d = gpt_dims_of(model);
  model.reserve(1, d.seq_len, 1);
  Rng rng(opts.seed);
  std::vector<int32_t> ctx = prompt, out;
  std::vector<float> row(d.vocab_padded);
  std::vector<int> order(d.vocab);
  std::vector<double> probs(d.vocab);
  for (int n = 0; n < opts.tokens; ++n) {
    const int T = static_cast<int>(std::min<size_t>(ctx.size(), d.seq_len));
    const int32_t* window = ctx.data() + (ctx.size() - T);
    model.forward(0, MicroBatch{.B = 1, .T = T, .tokens = window}, false, 0.0f);
    gpt_logits_row_to_host(model, 0, T - 1, row.data());
    int32_t next;
    if (opts.temperature <= 0) {
      next = static_cast<int32_t>(std::max_element(row.begin(), row.begin() + d.vocab) - row.begin());
    } else {
      std::iota(order.begin(), order.end(), 0);
      const int k = (opts.top_k > 0 && opts.top_k < d.vocab) ? opts.top_k : d.vocab;
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int a, int b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
      const double top = row[order[0]];
      double total = 0;
      for (int i = 0; i < k; ++i) total += probs[i] = std::exp((row[order[i]] - top) / opts.temperature);
      double u = rng.uniform() * total;
      int pick = k - 1;
      for (int i = 0; i < k; ++i) {
        if ((u -= probs[i]) < 0) {
          pick = i;
          break;
        }
      }
      next = order[pick];
    }
    if (next == opts.stop_token) break;
    out.push_back(next);
    ctx.push_back(next);
  }
  return out;
}

}  // namespace baton
