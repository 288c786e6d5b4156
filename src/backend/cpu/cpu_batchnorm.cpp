// Batch normalization on the CPU, sums in double over fixed blocks (see cpu_batchnorm.h).
#include "backend/cpu/cpu_batchnorm.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace baton {
namespace {

constexpr size_t kBlockRows = 256;  // rows per partial sum: the blocks, not the threads, fix the order

size_t blocks_of(size_t rows) { return (rows + kBlockRows - 1) / kBlockRows; }

// out[c] = Σ_blocks (Σ_rows of the block f(row, c)), each block's sum in double, blocks in order.
template <typename F>
void channel_sums(std::vector<double>& partial, double* out, size_t rows, int C, int parts, F f) {
  const size_t blocks = blocks_of(rows), width = size_t(C) * size_t(parts);
  partial.assign(blocks * width, 0.0);
#pragma omp parallel for schedule(static) if (rows * size_t(C) >= (1u << 15))
  for (size_t b = 0; b < blocks; ++b) {
    double* acc = partial.data() + b * width;
    const size_t end = std::min(rows, (b + 1) * kBlockRows);
    for (size_t r = b * kBlockRows; r < end; ++r) f(acc, r);
  }
  std::fill(out, out + width, 0.0);
  for (size_t b = 0; b < blocks; ++b)
    for (size_t j = 0; j < width; ++j) out[j] += partial[b * width + j];
}

// The forward's per-channel scale gamma / √(var + eps), one rounding from double: the fused
// backward recomputes the forward's output from it, so both must use this function.
float bn_scale(float gamma, float var, float eps) {
  return float(double(gamma) / std::sqrt(double(var) + double(eps)));
}
// The normalised value before any residual or ReLU, (x − mean) first: scale · x + shift would
// cancel when the mean is large against the spread. One expression for the forward and the fused
// backward's mask, so that the mask is exactly the forward's y > 0.
inline float bn_value(float x, float scale, float mean, float beta) { return scale * (x - mean) + beta; }
// g where y > 0, else 0 (relu_backward's select; a NaN y gives 0), as a bit mask: GCC leaves the
// ternary as a branch inside the sums loop, which then does not vectorise.
inline float where_positive(float g, float y) {
  return std::bit_cast<float>(std::bit_cast<uint32_t>(g) & (0u - uint32_t(y > 0.0f)));
}

}  // namespace

void CpuBatchNorm::forward(float* y, float* mean, float* var, const float* x, const float* gamma, const float* beta,
                           int N, int C, int HW, float eps, bool training, const float* residual, bool relu) {
  const size_t rows = size_t(N) * size_t(HW), C_ = size_t(C);
  if (training) {
    // One pass: Σx and Σx² per channel. In double the variance's E[x²] − mean² cancels harmlessly
    // (53 bits against fp32's 24: 1e-14 relative at a mean 10× the spread).
    sums_.assign(2 * C_, 0.0);
    double* s = sums_.data();
    channel_sums(partial_, s, rows, C, 2, [&](double* acc, size_t r) {
      const float* xr = x + r * C_;
#pragma omp simd
      for (size_t c = 0; c < C_; ++c) {
        const double v = double(xr[c]);
        acc[c] += v;
        acc[C_ + c] += v * v;
      }
    });
    for (size_t c = 0; c < C_; ++c) {
      const double m = s[c] / double(rows);
      mean[c] = float(m);
      var[c] = float(std::max(0.0, s[C_ + c] / double(rows) - m * m));
    }
  }
  // y = bn(x) [+ residual] [then ReLU: NaN kept, as relu_forward], in one pass.
  coef_.resize(C_);
  float* scale = coef_.data();
  for (size_t c = 0; c < C_; ++c) scale[c] = bn_scale(gamma[c], var[c], eps);
  const float* sc = scale;
#pragma omp parallel for schedule(static) if (rows * C_ >= (1u << 15))
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * C_;
    float* yr = y + r * C_;
    if (residual) {
      const float* rr = residual + r * C_;
#pragma omp simd
      for (size_t c = 0; c < C_; ++c) {
        const float v = bn_value(xr[c], sc[c], mean[c], beta[c]) + rr[c];
        yr[c] = relu && v <= 0.0f ? 0.0f : v;
      }
    } else {
#pragma omp simd
      for (size_t c = 0; c < C_; ++c) {
        const float v = bn_value(xr[c], sc[c], mean[c], beta[c]);
        yr[c] = relu && v <= 0.0f ? 0.0f : v;
      }
    }
  }
}

namespace {

// The backward's two passes, with (kRelu) or without the ReLU mask: a template, so that each loop
// is branch-free and vectorises.
template <bool kRelu>
void bn_backward_passes(std::vector<double>& partial, double* s, float* coef, float* dx, float* dgamma, float* dbeta,
                        const float* dy, const float* x, const float* mean, const float* var, const float* gamma,
                        const float* beta, size_t rows, size_t C_, float eps) {
  float *a = coef, *b = a + C_, *k = b + C_, *fs = k + C_;
  if (kRelu)
    for (size_t c = 0; c < C_; ++c) fs[c] = bn_scale(gamma[c], var[c], eps);
  // s[c] = Σ g, s[C + c] = Σ g · (x − mean), g = dy (masked by the forward's y > 0 under kRelu).
  channel_sums(partial, s, rows, int(C_), 2, [&](double* acc, size_t r) {
    const float* xr = x + r * C_;
    const float* dr = dy + r * C_;
#pragma omp simd
    for (size_t c = 0; c < C_; ++c) {
      float g = dr[c];
      if constexpr (kRelu) g = where_positive(g, bn_value(xr[c], fs[c], mean[c], beta[c]));
      acc[c] += double(g);
      acc[C_ + c] += double(g) * (double(xr[c]) - double(mean[c]));
    }
  });
  // x̂ = (x − mean)·inv; dgamma = Σ g·x̂, dbeta = Σ g;
  // dx = gamma·inv·(g − dbeta/M − x̂·dgamma/M) = a·g + b·(x − mean) + k per channel.
  for (size_t c = 0; c < C_; ++c) {
    const double inv = 1.0 / std::sqrt(double(var[c]) + double(eps));
    const double gi = double(gamma[c]) * inv, sum_g = s[c], dgam = s[C_ + c] * inv;
    if (dgamma) dgamma[c] += float(dgam);
    if (dbeta) dbeta[c] += float(sum_g);
    const double m = double(rows);
    a[c] = float(gi);
    b[c] = float(-gi * dgam * inv / m);
    k[c] = float(-gi * sum_g / m);
  }
  const float *ap = a, *bp = b, *kp = k, *fp = fs;
#pragma omp parallel for schedule(static) if (rows * C_ >= (1u << 15))
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * C_;
    const float* dr = dy + r * C_;
    float* o = dx + r * C_;
#pragma omp simd
    for (size_t c = 0; c < C_; ++c) {
      float g = dr[c];
      if constexpr (kRelu) g = where_positive(g, bn_value(xr[c], fp[c], mean[c], beta[c]));
      o[c] = ap[c] * g + bp[c] * (xr[c] - mean[c]) + kp[c];
    }
  }
}

}  // namespace

void CpuBatchNorm::backward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                            const float* mean, const float* var, const float* gamma, int N, int C, int HW,
                            float eps, const float* relu_beta) {
  const size_t rows = size_t(N) * size_t(HW), C_ = size_t(C);
  sums_.assign(2 * C_, 0.0);
  coef_.resize(4 * C_);
  // With a ReLU after the batch norm, dy counts where the forward's y = bn_value(x) > 0, recomputed
  // from x: exactly the forward's y, so the mask is relu_backward's, without reading y.
  if (relu_beta)
    bn_backward_passes<true>(partial_, sums_.data(), coef_.data(), dx, dgamma, dbeta, dy, x, mean, var, gamma,
                             relu_beta, rows, C_, eps);
  else
    bn_backward_passes<false>(partial_, sums_.data(), coef_.data(), dx, dgamma, dbeta, dy, x, mean, var, gamma,
                              nullptr, rows, C_, eps);
}

}  // namespace baton
