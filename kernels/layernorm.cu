// LayerNorm kernels: one warp per row for the forward and for dinp (two-pass mean/variance in
// float, as the CPU twin), and a two-stage column reduction over fixed row chunks for dweight and
// dbias (the chunking of kernels/reduce.cu), so every result is reproducible bit for bit.
//
// bf16 kernels: lane L of a row's warp owns the groups of 8 columns g = 32 k + L (k = 0, 1, ...)
// and accumulates its partial sums group by group, element by element, before the warp's
// butterfly. The 16-byte path (kVec) and the element-wise fallback visit the same elements in the
// same order, and holding a row in registers (VPL > 0 groups per lane) or streaming it again per
// pass (VPL = 0) changes no arithmetic: every path gives the same bits.
#include "kernels/cast.cuh"
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

__global__ void layernorm_dinp_kernel(float* dinp, const float* dres, const float* dout,
                                      const float* inp, const float* weight, const float* mean,
                                      const float* rstd, int N, int C) {
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
  const float* r = dres ? dres + off : nullptr;  // may be dx itself (in place)
  for (int c = lane; c < C; c += 32) {
    const float xhat = (x[c] - m) * s;
    dx[c] = (r ? r[c] : 0.0f) + s * (dy[c] * weight[c] - g_mean - xhat * gx_mean);
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


// ---- bf16 ----------------------------------------------------------------------------------

// Groups of 8 bf16 per lane held in registers: rows of C <= 32 * 8 * kMaxVpl stay in registers.
constexpr int kMaxVpl = 8;

// Valid columns (<= 8) of the group that starts at column c of a row of C.
__device__ __forceinline__ int group_valid(int c, int C) { return C - c < 8 ? C - c : 8; }

// kResidual: x = bf16(a + b) is written to `residual` first and normalised from the rounded values.
template <int VPL, bool kVec, bool kResidual>
__global__ void __launch_bounds__(32 * kRowsPerBlock)
    layernorm_forward_bf16_kernel(bf16* out, float* mean, float* rstd, bf16* residual,
                                  const bf16* inp, const bf16* b, const bf16* weight,
                                  const bf16* bias, int N, int C) {
  const int lane = threadIdx.x & 31;
  const int n = blockIdx.x * kRowsPerBlock + (threadIdx.x >> 5);
  if (n >= N) return;
  const size_t off = size_t(n) * C;
  const int groups = (C + 7) / 8;
  const int steps = VPL > 0 ? VPL : (groups + 31) / 32;
  // The row as normalised: the input, or the residual once written (each lane rereads only the
  // groups it wrote itself).
  const bf16* x = kResidual ? residual + off : inp + off;
  uint4 cache[VPL > 0 ? VPL : 1];
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < steps; k++) {
    const int c = (k * 32 + lane) * 8;
    if (c >= C) break;
    const int valid = kVec ? 8 : group_valid(c, C);
    uint4 raw;
    if constexpr (kResidual) {
      float fa[8], fb[8];
      unpack8(fa, load_group<kVec>(inp + off + c, valid));
      unpack8(fb, load_group<kVec>(b + off + c, valid));
#pragma unroll
      for (int j = 0; j < 8; j++) fa[j] += fb[j];
      raw = pack8(fa);
      store_group<kVec>(residual + off + c, raw, valid);
    } else {
      raw = load_group<kVec>(x + c, valid);
    }
    if constexpr (VPL > 0) cache[k] = raw;
    float f[8];
    unpack8(f, raw);
#pragma unroll
    for (int j = 0; j < 8; j++)
      if (j < valid) sum += f[j];
  }
  const float m = warp_sum(sum) / float(C);
  float var = 0.0f;
#pragma unroll
  for (int k = 0; k < steps; k++) {
    const int c = (k * 32 + lane) * 8;
    if (c >= C) break;
    const int valid = kVec ? 8 : group_valid(c, C);
    float f[8];
    if constexpr (VPL > 0)
      unpack8(f, cache[k]);
    else
      unpack8(f, load_group<kVec>(x + c, valid));
#pragma unroll
    for (int j = 0; j < 8; j++)
      if (j < valid) {
        const float d = f[j] - m;
        var += d * d;
      }
  }
  const float s = 1.0f / sqrtf(warp_sum(var) / float(C) + kEps);
#pragma unroll
  for (int k = 0; k < steps; k++) {
    const int c = (k * 32 + lane) * 8;
    if (c >= C) break;
    const int valid = kVec ? 8 : group_valid(c, C);
    float f[8], w[8], bb[8];
    if constexpr (VPL > 0)
      unpack8(f, cache[k]);
    else
      unpack8(f, load_group<kVec>(x + c, valid));
    unpack8(w, load_group<kVec>(weight + c, valid));
    unpack8(bb, load_group<kVec>(bias + c, valid));
#pragma unroll
    for (int j = 0; j < 8; j++) f[j] = (f[j] - m) * s * w[j] + bb[j];
    store_group<kVec>(out + off + c, pack8(f), valid);
  }
  if (lane == 0) {
    mean[n] = m;
    rstd[n] = s;
  }
}

template <int VPL, bool kVec>
__global__ void __launch_bounds__(32 * kRowsPerBlock)
    layernorm_dinp_bf16_kernel(bf16* dinp, const bf16* dres, const bf16* dout, const bf16* inp,
                               const bf16* weight, const float* mean, const float* rstd, int N, int C) {
  const int lane = threadIdx.x & 31;
  const int n = blockIdx.x * kRowsPerBlock + (threadIdx.x >> 5);
  if (n >= N) return;
  const size_t off = size_t(n) * C;
  const int groups = (C + 7) / 8;
  const int steps = VPL > 0 ? VPL : (groups + 31) / 32;
  const bf16* x = inp + off;
  const bf16* dy = dout + off;
  const float m = mean[n], s = rstd[n];
  uint4 xcache[VPL > 0 ? VPL : 1], dycache[VPL > 0 ? VPL : 1];
  float g_sum = 0.0f, gx_sum = 0.0f;
#pragma unroll
  for (int k = 0; k < steps; k++) {
    const int c = (k * 32 + lane) * 8;
    if (c >= C) break;
    const int valid = kVec ? 8 : group_valid(c, C);
    const uint4 xr = load_group<kVec>(x + c, valid), dyr = load_group<kVec>(dy + c, valid);
    if constexpr (VPL > 0) {
      xcache[k] = xr;
      dycache[k] = dyr;
    }
    float fx[8], fdy[8], w[8];
    unpack8(fx, xr);
    unpack8(fdy, dyr);
    unpack8(w, load_group<kVec>(weight + c, valid));
#pragma unroll
    for (int j = 0; j < 8; j++)
      if (j < valid) {
        const float g = fdy[j] * w[j];
        g_sum += g;
        gx_sum += g * (fx[j] - m) * s;
      }
  }
  const float g_mean = warp_sum(g_sum) / float(C), gx_mean = warp_sum(gx_sum) / float(C);
  bf16* dx = dinp + off;
  const bf16* r = dres ? dres + off : nullptr;  // may be dx itself (in place)
#pragma unroll
  for (int k = 0; k < steps; k++) {
    const int c = (k * 32 + lane) * 8;
    if (c >= C) break;
    const int valid = kVec ? 8 : group_valid(c, C);
    float fx[8], fdy[8], w[8], d[8];
    if constexpr (VPL > 0) {
      unpack8(fx, xcache[k]);
      unpack8(fdy, dycache[k]);
    } else {
      unpack8(fx, load_group<kVec>(x + c, valid));
      unpack8(fdy, load_group<kVec>(dy + c, valid));
    }
    unpack8(w, load_group<kVec>(weight + c, valid));
    if (r) {
      unpack8(d, load_group<kVec>(r + c, valid));
    } else {
#pragma unroll
      for (int j = 0; j < 8; j++) d[j] = 0.0f;
    }
#pragma unroll
    for (int j = 0; j < 8; j++) {
      const float xhat = (fx[j] - m) * s;
      d[j] += s * (fdy[j] * w[j] - g_mean - xhat * gx_mean);
    }
    store_group<kVec>(dx + c, pack8(d), valid);
  }
}

// Partials of dweight and dbias as the fp32 kernel (same layout, same row chunks and order per
// column), with each thread owning 8 adjacent columns: a (32, 8) block covers 256 columns.
template <bool kVec>
__global__ void __launch_bounds__(256)
    layernorm_param_partial_bf16_kernel(float* partial, const bf16* dout, const bf16* inp,
                                        const float* mean, const float* rstd, int N, int C,
                                        int rows, int chunks) {
  __shared__ float shw[8][8][33], shb[8][8][33];  // [ty][column within group][tx]
  const int c0 = (blockIdx.x * 32 + threadIdx.x) * 8;
  const int r0 = blockIdx.y * rows, r1 = min(N, r0 + rows);
  float dw[8], db[8];
#pragma unroll
  for (int j = 0; j < 8; j++) dw[j] = db[j] = 0.0f;
  if (c0 < C) {
    const int valid = kVec ? 8 : group_valid(c0, C);
    for (int r = r0 + threadIdx.y; r < r1; r += 8) {
      float dy[8], x[8];
      unpack8(dy, load_group<kVec>(dout + size_t(r) * C + c0, valid));
      unpack8(x, load_group<kVec>(inp + size_t(r) * C + c0, valid));
      const float m = mean[r], s = rstd[r];
#pragma unroll
      for (int j = 0; j < 8; j++) {
        dw[j] += dy[j] * (x[j] - m) * s;
        db[j] += dy[j];
      }
    }
  }
#pragma unroll
  for (int j = 0; j < 8; j++) {
    shw[threadIdx.y][j][threadIdx.x] = dw[j];
    shb[threadIdx.y][j][threadIdx.x] = db[j];
  }
  __syncthreads();
  const int t = threadIdx.y * 32 + threadIdx.x;  // this block's column t
  const int c = blockIdx.x * 256 + t;
  if (c < C) {
    float sw = 0.0f, sb = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; k++) {
      sw += shw[k][t & 7][t >> 3];
      sb += shb[k][t & 7][t >> 3];
    }
    partial[size_t(blockIdx.y) * C + c] = sw;
    partial[(size_t(chunks) + blockIdx.y) * C + c] = sb;
  }
}

// Groups per lane to hold in registers for a row of C (0: stream the row once per pass).
int vpl_for(int C) {
  const int steps = ceil_div(ceil_div(C, 8), 32);
  if (steps <= 4) return steps;
  if (steps <= 6) return 6;
  if (steps <= kMaxVpl) return kMaxVpl;
  return 0;
}

template <int VPL, bool kVec, bool kResidual>
void launch_ln_forward_bf16(bf16* out, float* mean, float* rstd, bf16* residual, const bf16* inp,
                            const bf16* b, const bf16* weight, const bf16* bias, int N, int C,
                            cudaStream_t s) {
  layernorm_forward_bf16_kernel<VPL, kVec, kResidual>
      <<<ceil_div(N, kRowsPerBlock), 32 * kRowsPerBlock, 0, s>>>(out, mean, rstd, residual, inp, b,
                                                                 weight, bias, N, C);
}

template <bool kResidual>
void ln_forward_bf16(bf16* out, float* mean, float* rstd, bf16* residual, const bf16* inp,
                     const bf16* b, const bf16* weight, const bf16* bias, int N, int C,
                     cudaStream_t s) {
  const bool vec = C % 8 == 0 && aligned16(out) && aligned16(residual) && aligned16(inp) &&
                   aligned16(b) && aligned16(weight) && aligned16(bias);
  if (!vec) return launch_ln_forward_bf16<0, false, kResidual>(out, mean, rstd, residual, inp, b, weight, bias, N, C, s);
  switch (vpl_for(C)) {
    case 1: return launch_ln_forward_bf16<1, true, kResidual>(out, mean, rstd, residual, inp, b, weight, bias, N, C, s);
    case 2: return launch_ln_forward_bf16<2, true, kResidual>(out, mean, rstd, residual, inp, b, weight, bias, N, C, s);
    case 3: return launch_ln_forward_bf16<3, true, kResidual>(out, mean, rstd, residual, inp, b, weight, bias, N, C, s);
    case 4: return launch_ln_forward_bf16<4, true, kResidual>(out, mean, rstd, residual, inp, b, weight, bias, N, C, s);
    case 6: return launch_ln_forward_bf16<6, true, kResidual>(out, mean, rstd, residual, inp, b, weight, bias, N, C, s);
    case kMaxVpl: return launch_ln_forward_bf16<kMaxVpl, true, kResidual>(out, mean, rstd, residual, inp, b, weight, bias, N, C, s);
    default: return launch_ln_forward_bf16<0, true, kResidual>(out, mean, rstd, residual, inp, b, weight, bias, N, C, s);
  }
}

template <int VPL, bool kVec>
void launch_ln_dinp_bf16(bf16* dinp, const bf16* dres, const bf16* dout, const bf16* inp,
                         const bf16* weight, const float* mean, const float* rstd, int N, int C,
                         cudaStream_t s) {
  layernorm_dinp_bf16_kernel<VPL, kVec><<<ceil_div(N, kRowsPerBlock), 32 * kRowsPerBlock, 0, s>>>(
      dinp, dres, dout, inp, weight, mean, rstd, N, C);
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

void layernorm_backward(float* dinp, const float* dres, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int N, int C, float* scratch, size_t scratch_floats,
                        cudaStream_t s) {
  BATON_KCHECK("layernorm_backward", N >= 0 && C > 0);
  if (N == 0) return;
  BATON_KCHECK("layernorm_backward", dout && inp && mean && rstd);
  if (dinp != nullptr) {
    BATON_KCHECK("layernorm_backward", weight != nullptr);
    layernorm_dinp_kernel<<<ceil_div(N, kRowsPerBlock), 32 * kRowsPerBlock, 0, s>>>(
        dinp, dres, dout, inp, weight, mean, rstd, N, C);
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

// ---- bf16 ----------------------------------------------------------------------------------

void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* weight,
                       const bf16* bias, int N, int C, cudaStream_t s) {
  BATON_KCHECK("layernorm_forward", N >= 0 && C > 0);
  if (N == 0) return;
  BATON_KCHECK("layernorm_forward", out && mean && rstd && inp && weight && bias);
  ln_forward_bf16<false>(out, mean, rstd, nullptr, inp, nullptr, weight, bias, N, C, s);
  check_launch("layernorm_forward");
}

void residual_layernorm_forward(bf16* residual, bf16* out, float* mean, float* rstd, const bf16* a,
                                const bf16* b, const bf16* weight, const bf16* bias, int N, int C,
                                cudaStream_t s) {
  BATON_KCHECK("residual_layernorm_forward", N >= 0 && C > 0);
  if (N == 0) return;
  BATON_KCHECK("residual_layernorm_forward", residual && out && mean && rstd && a && b && weight && bias);
  ln_forward_bf16<true>(out, mean, rstd, residual, a, b, weight, bias, N, C, s);
  check_launch("residual_layernorm_forward");
}

void layernorm_backward(bf16* dinp, const bf16* dres, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                        const bf16* weight, const float* mean, const float* rstd, int N, int C,
                        float* scratch, size_t scratch_floats, cudaStream_t s) {
  BATON_KCHECK("layernorm_backward", N >= 0 && C > 0);
  if (N == 0) return;
  BATON_KCHECK("layernorm_backward", dout && inp && mean && rstd);
  if (dinp != nullptr) {
    BATON_KCHECK("layernorm_backward", weight != nullptr);
    const bool vec = C % 8 == 0 && aligned16(dinp) && (!dres || aligned16(dres)) && aligned16(dout) && aligned16(inp) &&
                     aligned16(weight);
    if (!vec) {
      launch_ln_dinp_bf16<0, false>(dinp, dres, dout, inp, weight, mean, rstd, N, C, s);
    } else {
      switch (vpl_for(C)) {
        case 1: launch_ln_dinp_bf16<1, true>(dinp, dres, dout, inp, weight, mean, rstd, N, C, s); break;
        case 2: launch_ln_dinp_bf16<2, true>(dinp, dres, dout, inp, weight, mean, rstd, N, C, s); break;
        case 3: launch_ln_dinp_bf16<3, true>(dinp, dres, dout, inp, weight, mean, rstd, N, C, s); break;
        case 4: launch_ln_dinp_bf16<4, true>(dinp, dres, dout, inp, weight, mean, rstd, N, C, s); break;
        case 6: launch_ln_dinp_bf16<6, true>(dinp, dres, dout, inp, weight, mean, rstd, N, C, s); break;
        case kMaxVpl: launch_ln_dinp_bf16<kMaxVpl, true>(dinp, dres, dout, inp, weight, mean, rstd, N, C, s); break;
        default: launch_ln_dinp_bf16<0, true>(dinp, dres, dout, inp, weight, mean, rstd, N, C, s); break;
      }
    }
    check_launch("layernorm_backward");
  }
  if (dweight == nullptr && dbias == nullptr) return;
  BATON_KCHECK("layernorm_backward", scratch != nullptr);
  BATON_KCHECK("layernorm_backward", scratch_floats >= layernorm_backward_scratch_floats(N, C));
  const int rows = column_chunk_rows(N), chunks = ceil_div(N, rows);
  const dim3 grid(ceil_div(C, 256), chunks), block(32, 8);
  if (C % 8 == 0 && aligned16(dout) && aligned16(inp))
    layernorm_param_partial_bf16_kernel<true><<<grid, block, 0, s>>>(scratch, dout, inp, mean, rstd, N, C, rows, chunks);
  else
    layernorm_param_partial_bf16_kernel<false><<<grid, block, 0, s>>>(scratch, dout, inp, mean, rstd, N, C, rows, chunks);
  check_launch("layernorm_backward");
  layernorm_param_finish_kernel<<<ceil_div(C, 256), 256, 0, s>>>(dweight, dbias, scratch, chunks, C);
  check_launch("layernorm_backward");
}

}  // namespace baton::kernels
