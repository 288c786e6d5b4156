// CpuBackend layernorm (Ba et al. 2016) over the last dimension, eps = 1e-5:
//   out[N,C] = (inp - mean) * rstd * weight + bias,  rstd = 1 / sqrt(var + eps), var biased.
// Forward (and the fused residual variant) is parallel over rows N. Backward computes dinp per row
// and the parameter gradients dweight/dbias per column block (each block sums rows in order), so
// every result is deterministic for any thread count.
#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"

namespace baton {
namespace {

constexpr float kEps = 1e-5f;

// One row: two-pass mean/variance in float (the two-pass form avoids the cancellation of
// E[x^2] - E[x]^2), then the affine normalisation.
inline void layernorm_row(float* out, float* mean_out, float* rstd_out, const float* x,
                          const float* weight, const float* bias, int C) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int c = 0; c < C; c++) sum += x[c];
  const float m = sum / float(C);
  float var = 0.0f;
#pragma omp simd reduction(+ : var)
  for (int c = 0; c < C; c++) {
    float d = x[c] - m;
    var += d * d;
  }
  const float s = 1.0f / std::sqrt(var / float(C) + kEps);
#pragma omp simd
  for (int c = 0; c < C; c++) out[c] = (x[c] - m) * s * weight[c] + bias[c];
  *mean_out = m;
  *rstd_out = s;
}

}  // namespace

void CpuOps::layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                                   const float* weight, const float* bias, int N, int C) {
  BATON_ASSERT(N >= 0 && C > 0, "layernorm_forward: bad shape N={} C={}", N, C);
#pragma omp parallel for schedule(static) if (size_t(N) * C >= cpu_detail::kSerialBelow)
  for (int n = 0; n < N; n++) {
    const size_t off = size_t(n) * C;
    layernorm_row(out + off, mean + n, rstd + n, inp + off, weight, bias, C);
  }
}

void CpuOps::residual_layernorm_forward(float* residual, float* out, float* mean, float* rstd,
                                            const float* a, const float* b, const float* weight,
                                            const float* bias, int N, int C) {
  BATON_ASSERT(N >= 0 && C > 0, "residual_layernorm_forward: bad shape N={} C={}", N, C);
  // Fused so the residual row is still in cache when it is normalised.
#pragma omp parallel for schedule(static) if (size_t(N) * C >= cpu_detail::kSerialBelow)
  for (int n = 0; n < N; n++) {
    const size_t off = size_t(n) * C;
    float* r = residual + off;
#pragma omp simd
    for (int c = 0; c < C; c++) r[c] = a[off + c] + b[off + c];
    layernorm_row(out + off, mean + n, rstd + n, r, weight, bias, C);
  }
}

void CpuOps::layernorm_backward(float* dinp, const float* dres, float* dweight, float* dbias, const float* dout,
                                    const float* inp, const float* weight, const float* mean,
                                    const float* rstd, int N, int C) {
  BATON_ASSERT(N >= 0 && C > 0, "layernorm_backward: bad shape N={} C={}", N, C);
  const bool parallel = size_t(N) * C >= cpu_detail::kSerialBelow;
  // Each of the three gradients is skipped when its pointer is null (zero bubble splits the
  // backward into the input part, dinp, and the weight part, dweight/dbias); each part computes
  // exactly what the fused call does, so split == fused bit for bit.
  if (dinp != nullptr) {
  // dinp: with xhat = (x - mean) * rstd and g = dout * weight,
  //   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))      (added to dres: dinp = dres + dx)
#pragma omp parallel for schedule(static) if (parallel)
  for (int n = 0; n < N; n++) {
    const size_t off = size_t(n) * C;
    const float* x = inp + off;
    const float* dy = dout + off;
    const float m = mean[n], s = rstd[n];
    float g_sum = 0.0f, gx_sum = 0.0f;
#pragma omp simd reduction(+ : g_sum, gx_sum)
    for (int c = 0; c < C; c++) {
      float g = dy[c] * weight[c];
      g_sum += g;
      gx_sum += g * (x[c] - m) * s;
    }
    const float g_mean = g_sum / float(C), gx_mean = gx_sum / float(C);
    float* dx = dinp + off;
    if (dres != nullptr) {
      const float* r = dres + off;  // may be dx itself (in place)
#pragma omp simd
      for (int c = 0; c < C; c++) {
        float xhat = (x[c] - m) * s;
        dx[c] = r[c] + s * (dy[c] * weight[c] - g_mean - xhat * gx_mean);
      }
    } else {
#pragma omp simd
      for (int c = 0; c < C; c++) {
        float xhat = (x[c] - m) * s;
        dx[c] = 0.0f + s * (dy[c] * weight[c] - g_mean - xhat * gx_mean);
      }
    }
  }
  }
  if (dweight == nullptr && dbias == nullptr) return;
  // dweight[C] += sum_n dout * xhat;  dbias[C] += sum_n dout. Column blocks, rows in order.
  const int nblocks = (C + cpu_detail::kColBlock - 1) / cpu_detail::kColBlock;
#pragma omp parallel for schedule(static) if (parallel)
  for (int blk = 0; blk < nblocks; blk++) {
    const int c0 = blk * cpu_detail::kColBlock, c1 = std::min(C, c0 + cpu_detail::kColBlock);
    float dw[cpu_detail::kColBlock] = {}, db[cpu_detail::kColBlock] = {};
    for (int n = 0; n < N; n++) {
      const size_t off = size_t(n) * C;
      const float m = mean[n], s = rstd[n];
#pragma omp simd
      for (int c = c0; c < c1; c++) {
        float dy = dout[off + c];
        dw[c - c0] += dy * (inp[off + c] - m) * s;
        db[c - c0] += dy;
      }
    }
    if (dweight != nullptr)
      for (int c = c0; c < c1; c++) dweight[c] += dw[c - c0];
    if (dbias != nullptr)
      for (int c = c0; c < c1; c++) dbias[c] += db[c - c0];
  }
}

}  // namespace baton
