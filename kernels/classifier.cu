// Classifier kernels (see classifier.cuh): one block of kThreads per row, block reductions with a
// fixed tree (deterministic). Expression order follows the CPU twin (cpu_classifier.cpp).
#include "kernels/classifier.cuh"
#include "kernels/common.cuh"

namespace baton::kernels {
namespace {

constexpr int kThreads = 512;

__global__ void softmax_cross_entropy_kernel(float* losses, float* dlogits, const float* logits,
                                             const int32_t* targets, int V, int Vp, float dloss) {
  __shared__ float scratch[32];
  const int n = blockIdx.x;
  const float* x = logits + size_t(n) * Vp;
  float* d = dlogits != nullptr ? dlogits + size_t(n) * Vp : nullptr;
  const int32_t target = targets[n];
  if (target < 0) {  // uniform over the block
    if (threadIdx.x == 0) losses[n] = 0.0f;
    if (d != nullptr)
      for (int v = threadIdx.x; v < Vp; v += blockDim.x) d[v] = 0.0f;
    return;
  }
  // Read before any thread writes (block_max ends with barriers): dlogits may alias logits.
  const float x_target = target < V ? x[target] : NAN;
  float m = -INFINITY;
  for (int v = threadIdx.x; v < V; v += blockDim.x) m = fmaxf(m, x[v]);
  m = block_max(m, scratch);
  float sum = 0.0f;
  for (int v = threadIdx.x; v < V; v += blockDim.x) sum += expf(x[v] - m);
  sum = block_sum(sum, scratch);
  if (d != nullptr) {
    const float inv_sum = 1.0f / sum;
    for (int v = threadIdx.x; v < Vp; v += blockDim.x) {
      if (v < V) {
        float g = expf(x[v] - m) * inv_sum * dloss;
        if (v == target) g -= dloss;
        d[v] = g;
      } else {
        d[v] = 0.0f;
      }
    }
  }
  if (threadIdx.x == 0) losses[n] = logf(sum) + m - x_target;
}

__global__ void logits_row_max_kernel(float* maxv, const float* logits, int V_local, int Vl) {
  __shared__ float scratch[32];
  const float* x = logits + size_t(blockIdx.x) * Vl;
  float m = -INFINITY;
  for (int v = threadIdx.x; v < V_local; v += blockDim.x) m = fmaxf(m, x[v]);
  m = block_max(m, scratch);
  if (threadIdx.x == 0) maxv[blockIdx.x] = m;
}

__global__ void logits_sumexp_target_kernel(float* sumexp, float* target_logit, const float* logits,
                                            const float* maxv, const int32_t* targets, int V_local,
                                            int Vl, int vocab_start) {
  __shared__ float scratch[32];
  const int n = blockIdx.x;
  const float* x = logits + size_t(n) * Vl;
  const float m = maxv[n];
  float s = 0.0f;
  for (int v = threadIdx.x; v < V_local; v += blockDim.x) s += expf(x[v] - m);
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) {
    sumexp[n] = s;
    const int32_t j = targets[n] - vocab_start;
    target_logit[n] = (targets[n] >= 0 && j >= 0 && j < V_local) ? x[j] : 0.0f;
  }
}

__global__ void cross_entropy_finish_kernel(float* losses, float* dlogits, const float* logits,
                                            const float* maxv, const float* sumexp,
                                            const float* target_logit, const int32_t* targets,
                                            int V_local, int Vl, int vocab_start, float dloss) {
  const int n = blockIdx.x;
  const bool ignored = targets[n] < 0;
  if (threadIdx.x == 0)
    losses[n] = ignored ? 0.0f : logf(sumexp[n]) + maxv[n] - target_logit[n];
  if (dlogits == nullptr) return;
  const float* x = logits + size_t(n) * Vl;
  float* d = dlogits + size_t(n) * Vl;
  const float m = maxv[n];
  const float scale = ignored ? 0.0f : dloss / sumexp[n];
  const int32_t j = targets[n] - vocab_start;
  for (int v = threadIdx.x; v < Vl; v += blockDim.x) {
    if (v < V_local) {
      float g = expf(x[v] - m) * scale;
      if (!ignored && v == j) g -= dloss;
      d[v] = g;
    } else {
      d[v] = 0.0f;
    }
  }
}

}  // namespace

void softmax_cross_entropy(float* losses, float* dlogits, const float* logits,
                           const int32_t* targets, int N, int V, int Vp, float dloss,
                           cudaStream_t s) {
  BATON_KCHECK("softmax_cross_entropy", N >= 0 && V > 0 && Vp >= V);
  if (N == 0) return;
  BATON_KCHECK("softmax_cross_entropy", losses && logits && targets);
  softmax_cross_entropy_kernel<<<N, kThreads, 0, s>>>(losses, dlogits, logits, targets, V, Vp, dloss);
  check_launch("softmax_cross_entropy");
}

void logits_row_max(float* maxv, const float* logits, int N, int V_local, int Vl, cudaStream_t s) {
  BATON_KCHECK("logits_row_max", N >= 0 && V_local >= 0 && Vl >= V_local);
  if (N == 0) return;
  BATON_KCHECK("logits_row_max", maxv && (logits || Vl == 0));
  logits_row_max_kernel<<<N, kThreads, 0, s>>>(maxv, logits, V_local, Vl);
  check_launch("logits_row_max");
}

void logits_sumexp_target(float* sumexp, float* target_logit, const float* logits,
                          const float* maxv, const int32_t* targets, int N, int V_local, int Vl,
                          int vocab_start, cudaStream_t s) {
  BATON_KCHECK("logits_sumexp_target", N >= 0 && V_local >= 0 && Vl >= V_local);
  if (N == 0) return;
  BATON_KCHECK("logits_sumexp_target", sumexp && target_logit && maxv && targets && (logits || Vl == 0));
  logits_sumexp_target_kernel<<<N, kThreads, 0, s>>>(sumexp, target_logit, logits, maxv, targets,
                                                       V_local, Vl, vocab_start);
  check_launch("logits_sumexp_target");
}

void cross_entropy_finish(float* losses, float* dlogits, const float* logits, const float* maxv,
                          const float* sumexp, const float* target_logit, const int32_t* targets,
                          int N, int V_local, int Vl, int vocab_start, float dloss,
                          cudaStream_t s) {
  BATON_KCHECK("cross_entropy_finish", N >= 0 && V_local >= 0 && Vl >= V_local);
  if (N == 0) return;
  BATON_KCHECK("cross_entropy_finish", losses && maxv && sumexp && target_logit && targets);
  BATON_KCHECK("cross_entropy_finish", dlogits == nullptr || logits != nullptr || Vl == 0);
  cross_entropy_finish_kernel<<<N, kThreads, 0, s>>>(losses, dlogits, logits, maxv, sumexp,
                                                       target_logit, targets, V_local, Vl,
                                                       vocab_start, dloss);
  check_launch("cross_entropy_finish");
}

}  // namespace baton::kernels
