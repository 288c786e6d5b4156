// Classifier kernels (see classifier.cuh): one block of kThreads per row, block reductions with a
// fixed tree (deterministic). Expression order follows the CPU twin (cpu_classifier.cpp).
//
// bf16 kernels: thread t of a row's block owns the groups of 8 columns g = t + k * blockDim.x
// and accumulates group by group, element by element; the 16-byte path and the element-wise
// fallback visit the same elements in the same order (same bits).
#include "kernels/cast.cuh"
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


// ---- bf16 ----------------------------------------------------------------------------------

// Group at column c of a row whose first `real` columns hold logits: all 8 elements with one
// 16-byte access when kVec (the row length is a multiple of 8, so the group lies in the row),
// else the real ones element by element. Elements at or past `real` must be ignored by the caller.
template <bool kVec>
__device__ __forceinline__ void load_logits8(float (&f)[8], const bf16* row, int c, int real) {
  if constexpr (kVec)
    load8(f, row + c);
  else
    unpack8(f, load8_partial(row + c, real - c < 8 ? real - c : 8));
}

template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    softmax_cross_entropy_bf16_kernel(float* losses, bf16* dlogits, const bf16* logits,
                                      const int32_t* targets, int V, int Vp, float dloss) {
  __shared__ float scratch[32];
  const int n = blockIdx.x;
  const bf16* x = logits + size_t(n) * Vp;
  bf16* d = dlogits != nullptr ? dlogits + size_t(n) * Vp : nullptr;
  const int32_t target = targets[n];
  const int groups_p = (Vp + 7) / 8;
  if (target < 0) {  // uniform over the block
    if (threadIdx.x == 0) losses[n] = 0.0f;
    if (d != nullptr) {
      const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
      for (int g = threadIdx.x; g < groups_p; g += blockDim.x) {
        const int c = g * 8;
        store_group<kVec>(d + c, zero, kVec ? 8 : (Vp - c < 8 ? Vp - c : 8));
      }
    }
    return;
  }
  // Read before any thread writes (block_max ends with barriers): dlogits may alias logits.
  const float x_target = threadIdx.x == 0 && target < V ? __bfloat162float(x[target]) : NAN;
  // Online max and sum over this thread's groups.
  const int groups_v = (V + 7) / 8;
  float m = -INFINITY, sum = 0.0f;
  for (int g = threadIdx.x; g < groups_v; g += blockDim.x) {
    const int c = g * 8;
    const int valid = V - c < 8 ? V - c : 8;
    float f[8];
    load_logits8<kVec>(f, x, c, V);
    float gm = m;
#pragma unroll
    for (int j = 0; j < 8; j++)
      if (j < valid) gm = fmaxf(gm, f[j]);
    if (gm != m) {
      sum *= expf(m - gm);
      m = gm;
    }
#pragma unroll
    for (int j = 0; j < 8; j++)
      if (j < valid) sum += expf(f[j] - m);
  }
  const float row_max = block_max(m, scratch);
  if (m != row_max) sum *= expf(m - row_max);
  sum = block_sum(sum, scratch);
  if (d != nullptr) {
    const float inv_sum = 1.0f / sum;
    // Last groups first: the most recently read part of the row is the likeliest still in cache.
    const int t = threadIdx.x, bd = blockDim.x;
    const int last = t < groups_p ? t + (groups_p - 1 - t) / bd * bd : -1;
    for (int g = last; g >= 0; g -= bd) {
      const int c = g * 8;
      float f[8];
      if (c < V) {
        load_logits8<kVec>(f, x, c, V);
#pragma unroll
        for (int j = 0; j < 8; j++) {
          if (c + j < V) {
            float gr = expf(f[j] - row_max) * inv_sum * dloss;
            if (c + j == target) gr -= dloss;
            f[j] = gr;
          } else {
            f[j] = 0.0f;
          }
        }
      } else {
#pragma unroll
        for (int j = 0; j < 8; j++) f[j] = 0.0f;
      }
      store_group<kVec>(d + c, pack8(f), kVec ? 8 : (Vp - c < 8 ? Vp - c : 8));
    }
  }
  if (threadIdx.x == 0) losses[n] = logf(sum) + row_max - x_target;
}

template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    logits_row_max_bf16_kernel(float* maxv, const bf16* logits, int V_local, int Vl) {
  __shared__ float scratch[32];
  const bf16* x = logits + size_t(blockIdx.x) * Vl;
  float m = -INFINITY;
  for (int g = threadIdx.x; g < (V_local + 7) / 8; g += blockDim.x) {
    const int c = g * 8;
    const int valid = V_local - c < 8 ? V_local - c : 8;
    float f[8];
    load_logits8<kVec>(f, x, c, V_local);
#pragma unroll
    for (int j = 0; j < 8; j++)
      if (j < valid) m = fmaxf(m, f[j]);
  }
  m = block_max(m, scratch);
  if (threadIdx.x == 0) maxv[blockIdx.x] = m;
}

template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    logits_sumexp_target_bf16_kernel(float* sumexp, float* target_logit, const bf16* logits,
                                     const float* maxv, const int32_t* targets, int V_local,
                                     int Vl, int vocab_start) {
  __shared__ float scratch[32];
  const int n = blockIdx.x;
  const bf16* x = logits + size_t(n) * Vl;
  const float m = maxv[n];
  float s = 0.0f;
  for (int g = threadIdx.x; g < (V_local + 7) / 8; g += blockDim.x) {
    const int c = g * 8;
    const int valid = V_local - c < 8 ? V_local - c : 8;
    float f[8];
    load_logits8<kVec>(f, x, c, V_local);
#pragma unroll
    for (int j = 0; j < 8; j++)
      if (j < valid) s += expf(f[j] - m);
  }
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) {
    sumexp[n] = s;
    const int32_t j = targets[n] - vocab_start;
    target_logit[n] = (targets[n] >= 0 && j >= 0 && j < V_local) ? __bfloat162float(x[j]) : 0.0f;
  }
}

template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_finish_bf16_kernel(float* losses, bf16* dlogits, const bf16* logits,
                                     const float* maxv, const float* sumexp,
                                     const float* target_logit, const int32_t* targets,
                                     int V_local, int Vl, int vocab_start, float dloss) {
  const int n = blockIdx.x;
  const bool ignored = targets[n] < 0;
  if (threadIdx.x == 0)
    losses[n] = ignored ? 0.0f : logf(sumexp[n]) + maxv[n] - target_logit[n];
  if (dlogits == nullptr) return;
  const bf16* x = logits + size_t(n) * Vl;
  bf16* d = dlogits + size_t(n) * Vl;
  const float m = maxv[n];
  const float scale = ignored ? 0.0f : dloss / sumexp[n];
  const int32_t jt = targets[n] - vocab_start;
  for (int g = threadIdx.x; g < (Vl + 7) / 8; g += blockDim.x) {
    const int c = g * 8;
    float f[8];
    if (c < V_local) {
      load_logits8<kVec>(f, x, c, V_local);
#pragma unroll
      for (int j = 0; j < 8; j++) {
        if (c + j < V_local) {
          float gr = expf(f[j] - m) * scale;
          if (!ignored && c + j == jt) gr -= dloss;
          f[j] = gr;
        } else {
          f[j] = 0.0f;
        }
      }
    } else {
#pragma unroll
      for (int j = 0; j < 8; j++) f[j] = 0.0f;
    }
    store_group<kVec>(d + c, pack8(f), kVec ? 8 : (Vl - c < 8 ? Vl - c : 8));
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

// ---- bf16 ----------------------------------------------------------------------------------

void softmax_cross_entropy(float* losses, bf16* dlogits, const bf16* logits, const int32_t* targets,
                           int N, int V, int Vp, float dloss, cudaStream_t s) {
  BATON_KCHECK("softmax_cross_entropy", N >= 0 && V > 0 && Vp >= V);
  if (N == 0) return;
  BATON_KCHECK("softmax_cross_entropy", losses && logits && targets);
  if (Vp % 8 == 0 && aligned16(logits) && aligned16(dlogits))
    softmax_cross_entropy_bf16_kernel<true><<<N, kThreads, 0, s>>>(losses, dlogits, logits, targets, V, Vp, dloss);
  else
    softmax_cross_entropy_bf16_kernel<false><<<N, kThreads, 0, s>>>(losses, dlogits, logits, targets, V, Vp, dloss);
  check_launch("softmax_cross_entropy");
}

void logits_row_max(float* maxv, const bf16* logits, int N, int V_local, int Vl, cudaStream_t s) {
  BATON_KCHECK("logits_row_max", N >= 0 && V_local >= 0 && Vl >= V_local);
  if (N == 0) return;
  BATON_KCHECK("logits_row_max", maxv && (logits || Vl == 0));
  if (Vl % 8 == 0 && aligned16(logits))
    logits_row_max_bf16_kernel<true><<<N, kThreads, 0, s>>>(maxv, logits, V_local, Vl);
  else
    logits_row_max_bf16_kernel<false><<<N, kThreads, 0, s>>>(maxv, logits, V_local, Vl);
  check_launch("logits_row_max");
}

void logits_sumexp_target(float* sumexp, float* target_logit, const bf16* logits,
                          const float* maxv, const int32_t* targets, int N, int V_local, int Vl,
                          int vocab_start, cudaStream_t s) {
  BATON_KCHECK("logits_sumexp_target", N >= 0 && V_local >= 0 && Vl >= V_local);
  if (N == 0) return;
  BATON_KCHECK("logits_sumexp_target", sumexp && target_logit && maxv && targets && (logits || Vl == 0));
  if (Vl % 8 == 0 && aligned16(logits))
    logits_sumexp_target_bf16_kernel<true><<<N, kThreads, 0, s>>>(sumexp, target_logit, logits, maxv,
                                                                  targets, V_local, Vl, vocab_start);
  else
    logits_sumexp_target_bf16_kernel<false><<<N, kThreads, 0, s>>>(sumexp, target_logit, logits, maxv,
                                                                   targets, V_local, Vl, vocab_start);
  check_launch("logits_sumexp_target");
}

void cross_entropy_finish(float* losses, bf16* dlogits, const bf16* logits, const float* maxv,
                          const float* sumexp, const float* target_logit, const int32_t* targets,
                          int N, int V_local, int Vl, int vocab_start, float dloss,
                          cudaStream_t s) {
  BATON_KCHECK("cross_entropy_finish", N >= 0 && V_local >= 0 && Vl >= V_local);
  if (N == 0) return;
  BATON_KCHECK("cross_entropy_finish", losses && maxv && sumexp && target_logit && targets);
  BATON_KCHECK("cross_entropy_finish", dlogits == nullptr || logits != nullptr || Vl == 0);
  if (Vl % 8 == 0 && aligned16(logits) && aligned16(dlogits))
    cross_entropy_finish_bf16_kernel<true><<<N, kThreads, 0, s>>>(losses, dlogits, logits, maxv, sumexp,
                                                                  target_logit, targets, V_local, Vl,
                                                                  vocab_start, dloss);
  else
    cross_entropy_finish_bf16_kernel<false><<<N, kThreads, 0, s>>>(losses, dlogits, logits, maxv, sumexp,
                                                                   target_logit, targets, V_local, Vl,
                                                                   vocab_start, dloss);
  check_launch("cross_entropy_finish");
}

}  // namespace baton::kernels
