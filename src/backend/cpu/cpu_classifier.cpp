// CpuBackend fused softmax + cross-entropy over logits[N,Vp], of which the first V columns are real
// (Vp pads the vocabulary to a GEMM-friendly size; the padding never enters the softmax).
//   losses[n] = logsumexp(logits[n,:V]) - logits[n, target[n]]
//   dlogits[n,:V] = (softmax(logits[n,:V]) - onehot(target[n])) * dloss,  dlogits[n,V:] = 0.
// dlogits may alias logits: each element is read before it is written, and the row max/sum are
// taken first. No __restrict here on purpose. Targets < 0 mark ignored rows (loss 0, gradient 0).
#include <algorithm>
#include <limits>
#include <cmath>

#include "backend/cpu/cpu_math.h"
#include "backend/cpu/cpu_ops.h"
#include "core/error.h"

namespace baton {

void CpuOps::softmax_cross_entropy(float* losses, float* dlogits, const float* logits,
                                       const int32_t* targets, int N, int V, int Vp, float dloss) {
  BATON_ASSERT(N >= 0 && V > 0 && Vp >= V, "softmax_cross_entropy: bad shape N={} V={} Vp={}", N, V,
               Vp);
  // Checked before the parallel loop: an exception must not escape an OpenMP region.
  for (int n = 0; n < N; n++)
    BATON_ASSERT(targets[n] < V, "softmax_cross_entropy: target {} >= V={} at row {}", targets[n],
                 V, n);
#pragma omp parallel for schedule(static) if (size_t(N) * Vp >= cpu_detail::kSerialBelow)
  for (int n = 0; n < N; n++) {
    const float* x = logits + size_t(n) * Vp;
    const int32_t target = targets[n];
    if (target < 0) {
      losses[n] = 0.0f;
      if (dlogits != nullptr) {
        float* d = dlogits + size_t(n) * Vp;
        for (int v = 0; v < Vp; v++) d[v] = 0.0f;
      }
      continue;
    }
    // Max-shifted softmax: exp never overflows. With a gradient requested, the exponentials are
    // parked in dlogits during the sum pass so each is computed once; x[target] is read first
    // because that pass may overwrite logits (in-place use).
    const float x_target = x[target];
    const float maxv = cpu_math::max_of(x, size_t(V));
    // The sum of exponentials in double: over a 50k vocabulary an fp32 running sum drifts by
    // ~1e-5 relative, more than the GPU kernels' tree sums; the reference must be the accurate side.
    // The exponentials through cpu_math's vector exp (within 2 ulp), summed in fixed lanes.
    float* d = dlogits ? dlogits + size_t(n) * Vp : nullptr;
    const double sum = cpu_math::exp_sum(d, x, size_t(V), maxv);  // reads each x[v] before d[v]
    if (d != nullptr) {
      const float inv_sum = 1.0f / static_cast<float>(sum);
      for (int v = 0; v < V; v++) d[v] = d[v] * inv_sum * dloss;
      d[target] -= dloss;
      for (int v = V; v < Vp; v++) d[v] = 0.0f;
    }
    losses[n] = static_cast<float>(std::log(sum)) + maxv - x_target;
  }
}

// ---- vocab-parallel classifier: three passes, the caller reduces across ranks in between ----

void CpuOps::logits_row_max(float* maxv, const float* logits, int N, int V_local, int Vl) {
  BATON_ASSERT(N >= 0 && V_local >= 0 && Vl >= V_local, "logits_row_max: bad shape");
#pragma omp parallel for schedule(static) if (size_t(N) * Vl >= cpu_detail::kSerialBelow)
  for (int n = 0; n < N; n++) {
    const float* x = logits + size_t(n) * Vl;
    maxv[n] = V_local > 0 ? cpu_math::max_of(x, size_t(V_local)) : -std::numeric_limits<float>::infinity();
  }
}

void CpuOps::logits_sumexp_target(float* sumexp, float* target_logit, const float* logits,
                                      const float* maxv, const int32_t* targets, int N,
                                      int V_local, int Vl, int vocab_start) {
  BATON_ASSERT(N >= 0 && V_local >= 0 && Vl >= V_local, "logits_sumexp_target: bad shape");
#pragma omp parallel for schedule(static) if (size_t(N) * Vl >= cpu_detail::kSerialBelow)
  for (int n = 0; n < N; n++) {
    const float* x = logits + size_t(n) * Vl;
    sumexp[n] = static_cast<float>(cpu_math::exp_sum(nullptr, x, size_t(V_local), maxv[n]));  // as softmax_cross_entropy
    const int32_t j = targets[n] - vocab_start;
    target_logit[n] = (targets[n] >= 0 && j >= 0 && j < V_local) ? x[j] : 0.0f;
  }
}

void CpuOps::cross_entropy_finish(float* losses, float* dlogits, const float* logits,
                                      const float* maxv, const float* sumexp,
                                      const float* target_logit, const int32_t* targets, int N,
                                      int V_local, int Vl, int vocab_start, float dloss) {
  BATON_ASSERT(N >= 0 && V_local >= 0 && Vl >= V_local, "cross_entropy_finish: bad shape");
#pragma omp parallel for schedule(static) if (size_t(N) * Vl >= cpu_detail::kSerialBelow)
  for (int n = 0; n < N; n++) {
    const bool ignored = targets[n] < 0;
    losses[n] = ignored ? 0.0f : std::log(sumexp[n]) + maxv[n] - target_logit[n];
    if (dlogits == nullptr) continue;
    const float* x = logits + size_t(n) * Vl;
    float* d = dlogits + size_t(n) * Vl;
    const float scale = ignored ? 0.0f : dloss / sumexp[n];
    cpu_math::exp_scale(d, x, size_t(V_local), maxv[n], scale);
    for (int v = V_local; v < Vl; v++) d[v] = 0.0f;
    const int32_t j = targets[n] - vocab_start;
    if (!ignored && j >= 0 && j < V_local) d[j] -= dloss;
  }
}

// A class beats the target when its logit is strictly greater (ties count for the target).
void CpuOps::classification_hits(float* hits1, float* hits5, const float* logits,
                                 const int32_t* targets, int N, int V, int ld) {
#pragma omp parallel for schedule(static) if (size_t(N) * V >= cpu_detail::kSerialBelow)
  for (int n = 0; n < N; n++) {
    const int32_t t = targets[n];
    int above = 0;
    if (t >= 0 && t < V) {
      const float* x = logits + size_t(n) * ld;
      for (int j = 0; j < V; ++j) above += x[j] > x[t];
    }
    const bool valid = t >= 0 && t < V;
    hits1[n] = valid && above < 1 ? 1.0f : 0.0f;
    hits5[n] = valid && above < 5 ? 1.0f : 0.0f;
  }
}

}  // namespace baton
