// CpuBackend layernorm (Ba et al. 2016) over the last dimension, eps = 1e-5:
//   out[N,C] = (inp - mean) * rstd * weight + bias,  rstd = 1 / sqrt(var + eps), var biased.
// Forward (and the fused residual variant) is parallel over rows N. Backward computes dinp per row
// and the parameter gradients dweight/dbias per column block (each block sums rows in order), so
// every result is deterministic for any thread count.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "backend/cpu/cpu_math.h"
#include "backend/cpu/cpu_ops.h"
#include "core/dtype.h"
#include "core/error.h"

namespace baton {
namespace {

constexpr float kEps = 1e-5f;

// One row: two-pass mean/variance in float (the two-pass form avoids the cancellation of
// E[x^2] - E[x]^2), then the affine normalisation. Not inlined: the fp32 and bf16 ops run this one
// compiled loop, so their reductions associate alike and bf16 stores the fp32 result rounded.
[[gnu::noinline]] void layernorm_row(float* out, float* mean_out, float* rstd_out, const float* x,
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

// dinp of one row: with xhat = (x - mean) * rstd and g = dout * weight,
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))      (added to dres: dinp = dres + dx)
// dres may be dx itself (in place) or null. Not inlined, as layernorm_row.
[[gnu::noinline]] void layernorm_backward_row(float* dx, const float* r, const float* dy, const float* x,
                                              const float* weight, float m, float s, int C) {
  float g_sum = 0.0f, gx_sum = 0.0f;
#pragma omp simd reduction(+ : g_sum, gx_sum)
  for (int c = 0; c < C; c++) {
    float g = dy[c] * weight[c];
    g_sum += g;
    gx_sum += g * (x[c] - m) * s;
  }
  const float g_mean = g_sum / float(C), gx_mean = gx_sum / float(C);
  if (r != nullptr) {
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

// Activations of type T (float, or bf16 bits as uint16_t) seen as fp32 rows. For bf16 a row is
// widened into a per-thread buffer (exact) and an output row rounded once from its fp32 values —
// the bits of the emulation that widens whole tensors (cpu_backend.cpp's F32View), without its
// passes over full-size fp32 copies (the bf16 layernorms ran ~3x slower than fp32 through them).
template <typename T>
struct Rows {
  static const float* in(const T* p, float*, int) { return p; }
  static float* out(T* p, float*) { return p; }
  static void store(T*, const float*, int) {}
};
template <>
struct Rows<uint16_t> {
  static const float* in(const uint16_t* p, float* buf, int C) {
    if (p == nullptr) return nullptr;
    cpu_math::widen_bf16(buf, p, C);  // serial below 2^15 values
    return buf;
  }
  static float* out(uint16_t* p, float* buf) { return p ? buf : nullptr; }
  static void store(uint16_t* p, const float* buf, int C) { cpu_math::narrow_bf16(p, buf, C); }
};

// Per-thread staging rows: k rows of C floats for bf16; none for fp32.
template <typename T>
class RowBuffers {
 public:
  RowBuffers(int C, int k) : C_(C) {
    if constexpr (std::is_same_v<T, uint16_t>) buf_.resize(size_t(C) * k);
  }
  float* operator[](int i) { return buf_.empty() ? nullptr : buf_.data() + size_t(i) * C_; }

 private:
  int C_;
  std::vector<float> buf_;
};

// A [C] vector (weight, bias) as fp32: itself, or a widened copy made once per call.
template <typename T>
struct Vec {
  Vec(const T* p, int C) : p_(p) {
    if constexpr (std::is_same_v<T, uint16_t>)
      if (p) {
        w_.resize(C);
        cpu_math::widen_bf16(w_.data(), p, C);
      }
  }
  const float* get() const {
    if constexpr (std::is_same_v<T, uint16_t>)
      return p_ ? w_.data() : nullptr;
    else
      return p_;
  }
  const T* p_;
  std::vector<float> w_;
};

// The forward over rows: out = layernorm(x) of x = inp (residual null), or fused with the residual
// add — residual = inp + b stored, then normalised while the row is still in cache (in bf16 the
// stored, rounded residual, as the CUDA kernel reads it).
template <typename T>
void forward(T* residual, T* out, float* mean, float* rstd, const T* inp, const T* b, const T* weight, const T* bias,
             int N, int C) {
  BATON_ASSERT(N >= 0 && C > 0, "{}: bad shape N={} C={}",
               residual ? "residual_layernorm_forward" : "layernorm_forward", N, C);
  const Vec<T> w(weight, C), bi(bias, C);
#pragma omp parallel if (size_t(N) * C >= cpu_detail::kSerialBelow)
  {
    RowBuffers<T> buf(C, 2);
#pragma omp for schedule(static)
    for (int n = 0; n < N; n++) {
      const size_t off = size_t(n) * C;
      const T* x = inp + off;
      if (residual != nullptr) {
        T* r = residual + off;
#pragma omp simd
        for (int c = 0; c < C; c++) {
          cpu_detail::store_f32(r + c, cpu_detail::to_f32(inp[off + c]) + cpu_detail::to_f32(b[off + c]));
        }
        x = r;
      }
      layernorm_row(Rows<T>::out(out + off, buf[0]), mean + n, rstd + n, Rows<T>::in(x, buf[1], C), w.get(),
                    bi.get(), C);
      Rows<T>::store(out + off, buf[0], C);
    }
  }
}

template <typename T>
void backward(T* dinp, const T* dres, float* dweight, float* dbias, const T* dout, const T* inp, const T* weight,
              const float* mean, const float* rstd, int N, int C) {
  BATON_ASSERT(N >= 0 && C > 0, "layernorm_backward: bad shape N={} C={}", N, C);
  const bool parallel = size_t(N) * C >= cpu_detail::kSerialBelow;
  // Each of the three gradients is skipped when its pointer is null (zero bubble splits the
  // backward into the input part, dinp, and the weight part, dweight/dbias); each part computes
  // exactly what the fused call does, so split == fused bit for bit.
  if (dinp != nullptr) {
    const Vec<T> w(weight, C);
#pragma omp parallel if (parallel)
    {
      RowBuffers<T> buf(C, 4);
#pragma omp for schedule(static)
      for (int n = 0; n < N; n++) {
        const size_t off = size_t(n) * C;
        // dres: its own row, or (in place) the output row's staging buffer holding it.
        float* dx = Rows<T>::out(dinp + off, buf[0]);
        const float* r = dres == nullptr ? nullptr
                         : dres == dinp  ? Rows<T>::in(dres + off, dx, C)
                                         : Rows<T>::in(dres + off, buf[1], C);
        layernorm_backward_row(dx, r, Rows<T>::in(dout + off, buf[2], C), Rows<T>::in(inp + off, buf[3], C), w.get(),
                               mean[n], rstd[n], C);
        Rows<T>::store(dinp + off, dx, C);
      }
    }
  }
  if (dweight == nullptr && dbias == nullptr) return;
  // dweight[C] += sum_n dout * xhat;  dbias[C] += sum_n dout. Column blocks, rows in order
  // (elementwise across columns: the same bits however the loop is vectorised).
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
        float dy = cpu_detail::to_f32(dout[off + c]);
        dw[c - c0] += dy * (cpu_detail::to_f32(inp[off + c]) - m) * s;
        db[c - c0] += dy;
      }
    }
    if (dweight != nullptr)
      for (int c = c0; c < c1; c++) dweight[c] += dw[c - c0];
    if (dbias != nullptr)
      for (int c = c0; c < c1; c++) dbias[c] += db[c - c0];
  }
}

}  // namespace

void CpuOps::layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                               const float* bias, int N, int C) {
  forward<float>(nullptr, out, mean, rstd, inp, nullptr, weight, bias, N, C);
}
void CpuOps::layernorm_forward(uint16_t* out, float* mean, float* rstd, const uint16_t* inp,
                               const uint16_t* weight, const uint16_t* bias, int N, int C) {
  forward<uint16_t>(nullptr, out, mean, rstd, inp, nullptr, weight, bias, N, C);
}
void CpuOps::residual_layernorm_forward(float* residual, float* out, float* mean, float* rstd, const float* a,
                                        const float* b, const float* weight, const float* bias, int N, int C) {
  forward(residual, out, mean, rstd, a, b, weight, bias, N, C);
}
void CpuOps::residual_layernorm_forward(uint16_t* residual, uint16_t* out, float* mean, float* rstd,
                                        const uint16_t* a, const uint16_t* b, const uint16_t* weight,
                                        const uint16_t* bias, int N, int C) {
  forward(residual, out, mean, rstd, a, b, weight, bias, N, C);
}
void CpuOps::layernorm_backward(float* dinp, const float* dres, float* dweight, float* dbias, const float* dout,
                                const float* inp, const float* weight, const float* mean, const float* rstd, int N,
                                int C) {
  backward(dinp, dres, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}
void CpuOps::layernorm_backward(uint16_t* dinp, const uint16_t* dres, float* dweight, float* dbias,
                                const uint16_t* dout, const uint16_t* inp, const uint16_t* weight,
                                const float* mean, const float* rstd, int N, int C) {
  backward(dinp, dres, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

}  // namespace baton
