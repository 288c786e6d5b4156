// Batch normalization on the CPU, sums in double over fixed blocks (see cpu_batchnorm.h).
#include "backend/cpu/cpu_batchnorm.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

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

}  // namespace

void CpuBatchNorm::forward(float* y, float* mean, float* var, const float* x, const float* gamma, const float* beta,
                           int N, int C, int HW, float eps, bool training) {
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
  // y = (x − mean) · gamma / √(var + eps) + beta (x − mean first: scale · x + shift would cancel
  // when the mean is large against the spread).
  coef_.resize(C_);
  float* scale = coef_.data();
  for (size_t c = 0; c < C_; ++c) scale[c] = float(double(gamma[c]) / std::sqrt(double(var[c]) + double(eps)));
  const float* sc = scale;
#pragma omp parallel for schedule(static) if (rows * C_ >= (1u << 15))
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * C_;
    float* yr = y + r * C_;
#pragma omp simd
    for (size_t c = 0; c < C_; ++c) yr[c] = sc[c] * (xr[c] - mean[c]) + beta[c];
  }
}

void CpuBatchNorm::backward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                            const float* mean, const float* var, const float* gamma, int N, int C, int HW,
                            float eps) {
  const size_t rows = size_t(N) * size_t(HW), C_ = size_t(C);
  // s[c] = Σ dy, s[C + c] = Σ dy · (x − mean).
  sums_.assign(2 * C_, 0.0);
  double* s = sums_.data();
  channel_sums(partial_, s, rows, C, 2, [&](double* acc, size_t r) {
    const float* xr = x + r * C_;
    const float* dr = dy + r * C_;
#pragma omp simd
    for (size_t c = 0; c < C_; ++c) {
      acc[c] += double(dr[c]);
      acc[C_ + c] += double(dr[c]) * (double(xr[c]) - double(mean[c]));
    }
  });
  // x̂ = (x − mean)·inv; dgamma = Σ dy·x̂, dbeta = Σ dy;
  // dx = gamma·inv·(dy − dbeta/M − x̂·dgamma/M) = a·dy + b·(x − mean) + k per channel.
  coef_.resize(3 * C_);
  float *a = coef_.data(), *b = a + C_, *k = b + C_;
  for (size_t c = 0; c < C_; ++c) {
    const double inv = 1.0 / std::sqrt(double(var[c]) + double(eps));
    const double g = double(gamma[c]) * inv, sum_dy = s[c], dgam = s[C_ + c] * inv;
    if (dgamma) dgamma[c] += float(dgam);
    if (dbeta) dbeta[c] += float(sum_dy);
    const double m = double(rows);
    a[c] = float(g);
    b[c] = float(-g * dgam * inv / m);
    k[c] = float(-g * sum_dy / m);
  }
  const float *ap = a, *bp = b, *kp = k;
#pragma omp parallel for schedule(static) if (rows * C_ >= (1u << 15))
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * C_;
    const float* dr = dy + r * C_;
    float* o = dx + r * C_;
#pragma omp simd
    for (size_t c = 0; c < C_; ++c) o[c] = ap[c] * dr[c] + bp[c] * (xr[c] - mean[c]) + kp[c];
  }
}

}  // namespace baton
