// CpuOps elementwise ops (scale/add/residual, GELU, sum_squares).
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/cpu_math.h"

#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "core/dropout_mask.h"
#include "core/error.h"

namespace baton {

using cpu_detail::kSerialBelow;

void CpuOps::scale(float* x, float s, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kSerialBelow)
  for (size_t i = 0; i < n; i++) x[i] *= s;
}

void CpuOps::add(float* dst, const float* src, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kSerialBelow)
  for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

void CpuOps::residual_forward(float* out, const float* a, const float* b, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kSerialBelow)
  for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

double CpuOps::sum_squares(const float* x, size_t n) { return cpu_math::sum_squares(x, n); }

// GELU, tanh approximation (Hendrycks & Gimpel 2016, as in GPT-2), through cpu_math.h's
// vectorisable form: gelu(x) = 0.5 x (1 + tanh(k (x + 0.044715 x^3))) = x sigma(2u), k = sqrt(2/pi).
void CpuOps::gelu_forward(float* out, const float* inp, size_t n) {
  cpu_math::gelu_map(out, inp, nullptr, n, /*grad=*/false);
}

void CpuOps::gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
  // Overwrites dinp (Backend contract); dinp may equal dout (each block reads before it writes).
  cpu_math::gelu_map(dinp, inp, dout, n, /*grad=*/true);
}

void CpuOps::dropout(float* y, const float* x, int rows, int row_elems, float p, uint64_t seed,
                     int64_t first_row) {
  const uint32_t threshold = dropout_threshold(p);
  const float keep_scale = 1.0f / (1.0f - p);
#pragma omp parallel for schedule(static) if (size_t(rows) * row_elems >= kSerialBelow)
  for (int r = 0; r < rows; ++r) {
    const size_t base = size_t(r) * row_elems;
    const uint64_t row = static_cast<uint64_t>(first_row + r);
    for (int j = 0; j < row_elems; ++j)
      y[base + j] = dropout_keep(seed, row, uint64_t(j), threshold) ? x[base + j] * keep_scale : 0.0f;
  }
}

}  // namespace baton
