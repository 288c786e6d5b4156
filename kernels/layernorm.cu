// LayerNorm kernels: one warp per row for the forward and for dinp (two-pass mean/variance in
// float, as the CPU twin), and a two-stage column reduction over fixed row chunks for dweight and
// dbias (the chunking of kernels/reduce.cu), so every result is reproducible bit for bit.
#include "kernels/common.cuh"
#include "kernels/layernorm.cuh"
#include "kernels/reduce.cuh"

namespace baton::kernels {
namespace {

constexpr float kEps = 1e-5f;
constexpr int kRowsPerBlock = 8;  // warps per block, one row each

// kResidual: x = a + b is written to `residual` first and normalised from there.
template <bool kResidual>
__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, float* residual,
                                         const float* inp, const float* b, const float* weight,
                                         const float* bias, int N, int C) {
  const int lane = threadIdx.x & 31;
  const int n = blockIdx.x * kRowsPerBlock + (threadIdx.x >> 5);
  if (n >= N) return;
  const size_t off = size_t(n) * C;
  const float* x = inp + off;
  if constexpr (kResidual) {
    float* r = residual + off;
    for (int c = lane; c < C; c += 32) r[c] = x[c] + b[off + c];
    __syncwarp();
    x = r;
  }
  float sum = 0.0f;
  for (int c = lane; c < C; c += 32) sum += x[c];
  const float m = warp_sum(sum) / float(C);
  float var = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float d = x[c] - m;
    var += d * d;
  }
  const float s = 1.0f / sqrtf(warp_sum(var) / float(C) + kEps);
  float* o = out + off;
  for (int c = lane; c < C; c += 32) o[c] = (x[c] - m) * s * weight[c] + bias[c];
  if (lane == 0) {
    mean[n] = m;
    rstd[n] = s;
  }
}

__global__ void layernorm_dinp_kernel(float* dinp, const float* dout, const float* inp,
                                      const float* weight, const float* mean, const float* rstd,
                                      int N, int C) {
  const int lane = threadIdx.x & 31;
  const int n = blockIdx.x * kRowsPerBlock + (threadIdx.x >> 5);
  if (n >= N) return;
  const size_t off = size_t(n) * C;
  const float* x = inp + off;
  const float* dy = dout + off;
  const float m = mean[n], s = rstd[n];
  float g_sum = 0.0f, gx_sum = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float g = dy[c] * weight[c];
    g_sum += g;
    gx_sum += g * (x[c] - m) * s;
  }
  const float g_mean = warp_sum(g_sum) / float(C), gx_mean = warp_sum(gx_sum) / float(C);
  float* dx = dinp + off;
  for (int c = lane; c < C; c += 32) {
    const float xhat = (x[c] - m) * s;
    dx[c] += s * (dy[c] * weight[c] - g_mean - xhat * gx_mean);
  }
}

// Partials of dweight (first chunks*C floats of `partial`) and dbias (the next chunks*C).
__global__ void layernorm_param_partial_kernel(float* partial, const float* dout, const float* inp,
                                               const float* mean, const float* rstd, int N, int C,
                                               int rows, int chunks) {
  __shared__ float shw[8][33], shb[8][33];
  const int c = blockIdx.x * 32 + threadIdx.x;
  const int r0 = blockIdx.y * rows, r1 = min(N, r0 + rows);
  float dw = 0.0f, db = 0.0f;
  if (c < C)
    for (int r = r0 + threadIdx.y; r < r1; r += 8) {
      const float dy = dout[size_t(r) * C + c];
      dw += dy * (inp[size_t(r) * C + c] - mean[r]) * rstd[r];
      db += dy;
    }
  shw[threadIdx.y][threadIdx.x] = dw;
  shb[threadIdx.y][threadIdx.x] = db;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float sw = 0.0f, sb = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; k++) {
      sw += shw[k][threadIdx.x];
      sb += shb[k][threadIdx.x];
    }
    partial[size_t(blockIdx.y) * C + c] = sw;
    partial[(size_t(chunks) + blockIdx.y) * C + c] = sb;
  }
}

__global__ void layernorm_param_finish_kernel(float* dweight, float* dbias, const float* partial,
                                              int chunks, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float sw = 0.0f, sb = 0.0f;
  for (int k = 0; k < chunks; k++) {
    sw += partial[size_t(k) * C + c];
    sb += partial[(size_t(chunks) + k) * C + c];
  }
  if (dweight != nullptr) dweight[c] += sw;
  if (dbias != nullptr) dbias[c] += sb;
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, cudaStream_t s) {
  BATON_KCHECK("layernorm_forward", N >= 0 && C > 0);
  if (N == 0) return;
  BATON_KCHECK("layernorm_forward", out && mean && rstd && inp && weight && bias);
  layernorm_forward_kernel<false><<<ceil_div(N, kRowsPerBlock), 32 * kRowsPerBlock, 0, s>>>(
      out, mean, rstd, nullptr, inp, nullptr, weight, bias, N, C);
  check_launch("layernorm_forward");
}

void residual_layernorm_forward(float* residual, float* out, float* mean, float* rstd,
                                const float* a, const float* b, const float* weight,
                                const float* bias, int N, int C, cudaStream_t s) {
  BATON_KCHECK("residual_layernorm_forward", N >= 0 && C > 0);
  if (N == 0) return;
  BATON_KCHECK("residual_layernorm_forward", residual && out && mean && rstd && a && b && weight && bias);
  layernorm_forward_kernel<true><<<ceil_div(N, kRowsPerBlock), 32 * kRowsPerBlock, 0, s>>>(
      out, mean, rstd, residual, a, b, weight, bias, N, C);
  check_launch("residual_layernorm_forward");
}

size_t layernorm_backward_scratch_floats(int N, int C) { return 2 * column_sum_scratch_floats(N, C); }

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int N, int C, float* scratch, size_t scratch_floats,
                        cudaStream_t s) {
  BATON_KCHECK("layernorm_backward", N >= 0 && C > 0);
  if (N == 0) return;
  BATON_KCHECK("layernorm_backward", dout && inp && mean && rstd);
  if (dinp != nullptr) {
    BATON_KCHECK("layernorm_backward", weight != nullptr);
    layernorm_dinp_kernel<<<ceil_div(N, kRowsPerBlock), 32 * kRowsPerBlock, 0, s>>>(
        dinp, dout, inp, weight, mean, rstd, N, C);
    check_launch("layernorm_backward");
  }
  if (dweight == nullptr && dbias == nullptr) return;
  BATON_KCHECK("layernorm_backward", scratch != nullptr);
  BATON_KCHECK("layernorm_backward", scratch_floats >= layernorm_backward_scratch_floats(N, C));
  const int rows = column_chunk_rows(N), chunks = ceil_div(N, rows);
  layernorm_param_partial_kernel<<<dim3(ceil_div(C, 32), chunks), dim3(32, 8), 0, s>>>(
      scratch, dout, inp, mean, rstd, N, C, rows, chunks);
  check_launch("layernorm_backward");
  layernorm_param_finish_kernel<<<ceil_div(C, 256), 256, 0, s>>>(dweight, dbias, scratch, chunks, C);
  check_launch("layernorm_backward");
}

}  // namespace baton::kernels
