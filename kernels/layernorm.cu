// LayerNorm kernels: one warp per row for the forward (two-pass mean/variance in float, as the CPU
// twin); the backward is one kernel per call that reads each row of dout and inp once for dinp and
// for per-block partial sums of dweight and dbias (fixed row chunks, per-warp sums in shared
// memory, no atomics), then a small kernel that adds the partials in block order: every result is
// reproducible bit for bit. (llm.c's single kernel finishes in the last block through an atomic
// counter; the emulator and our determinism rule refuse atomics, hence the second launch, which
// reads only the 2 * blocks * C partials.)
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

// The backward's rows are split into fixed chunks of bwd_rows(N) rows, one block each; warp w of a
// block of W warps takes rows r0 + w, r0 + w + W, ... and keeps its own fp32 sums of dout*xhat and
// dout per column in shared memory (each lane owns its columns: no atomics), so dout and inp are
// read once per row for dinp and the parameter gradients together. The block then adds its W
// warps' sums in warp order into its partial row; a finish kernel adds the blocks' partials in
// block order. Same inputs, same sizes -> same bits.
int bwd_rows(int N) { return std::max(32, ceil_div(N, 1024)); }  // <= 1024 blocks of >= 32 rows
constexpr size_t kBwdSmemDefault = 48 * 1024;                    // without the opt-in
constexpr size_t kBwdSmemMax = 227 * 1024;                       // an H100's opt-in limit

// Warps per block for `per_warp` bytes of shared sums each: as many as fit in 48 KiB, at most 8,
// at least 1 (with the opt-in above 48 KiB).
int bwd_warps(size_t per_warp) { return int(std::clamp<size_t>(kBwdSmemDefault / per_warp, 1, kRowsPerBlock)); }

__global__ void __launch_bounds__(32 * kRowsPerBlock)
    layernorm_backward_kernel(float* dinp, const float* dres, float* partial, const float* dout,
                              const float* inp, const float* weight, const float* mean,
                              const float* rstd, int N, int C, int rows) {
  extern __shared__ float acc[];  // [warp][dweight C | dbias C], when partial != nullptr
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  const bool params = partial != nullptr;
  float* adw = acc + size_t(warp) * 2 * C;
  float* adb = adw + C;
  if (params)
    for (int c = lane; c < C; c += 32) adw[c] = adb[c] = 0.0f;
  const int r0 = blockIdx.x * rows, r1 = min(N, r0 + rows);
  for (int n = r0 + warp; n < r1; n += nwarps) {
    const size_t off = size_t(n) * C;
    const float* x = inp + off;
    const float* dy = dout + off;
    const float m = mean[n], s = rstd[n];
    float g_sum = 0.0f, gx_sum = 0.0f;
    for (int c = lane; c < C; c += 32) {
      const float dyc = dy[c], xc = x[c];
      if (params) {
        adw[c] += dyc * (xc - m) * s;
        adb[c] += dyc;
      }
      if (dinp != nullptr) {
        const float g = dyc * weight[c];
        g_sum += g;
        gx_sum += g * (xc - m) * s;
      }
    }
    if (dinp == nullptr) continue;
    const float g_mean = warp_sum(g_sum) / float(C), gx_mean = warp_sum(gx_sum) / float(C);
    float* dx = dinp + off;
    const float* r = dres ? dres + off : nullptr;  // may be dx itself (in place)
    // The row again, as this lane just read it (L1), not from memory.
    for (int c = lane; c < C; c += 32) {
      const float xhat = (x[c] - m) * s;
      dx[c] = (r ? r[c] : 0.0f) + s * (dy[c] * weight[c] - g_mean - xhat * gx_mean);
    }
  }
  if (!params) return;
  __syncthreads();
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float sw = 0.0f, sb = 0.0f;
    for (int w = 0; w < nwarps; w++) {
      sw += acc[size_t(w) * 2 * C + c];
      sb += acc[size_t(w) * 2 * C + C + c];
    }
    partial[size_t(blockIdx.x) * C + c] = sw;
    partial[(size_t(gridDim.x) + blockIdx.x) * C + c] = sb;
  }
}

// dweight[c] += the blocks' dweight partials (the first `blocks` rows of `partial`), dbias[c] += the
// next `blocks` rows; block (32, 8): ty adds blocks ty, ty + 8, ..., then the 8 sums in ty order.
__global__ void layernorm_param_finish_kernel(float* dweight, float* dbias, const float* partial,
                                              int blocks, int C) {
  __shared__ float shw[8][33], shb[8][33];
  const int c = blockIdx.x * 32 + threadIdx.x;
  float sw = 0.0f, sb = 0.0f;
  if (c < C)
    for (int k = threadIdx.y; k < blocks; k += 8) {
      sw += partial[size_t(k) * C + c];
      sb += partial[(size_t(blocks) + k) * C + c];
    }
  shw[threadIdx.y][threadIdx.x] = sw;
  shb[threadIdx.y][threadIdx.x] = sb;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  sw = sb = 0.0f;
#pragma unroll
  for (int k = 0; k < 8; k++) {
    sw += shw[k][threadIdx.x];
    sb += shb[k][threadIdx.x];
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

// The fused backward over bf16 (see layernorm_backward_kernel): lane L of warp w owns the groups
// of 8 columns g = 32 k + L of each of its rows; its sums of dout*xhat and dout sit in shared memory
// as [w][dweight | dbias][8][groups] (element j of group g at j * groups + g: consecutive lanes hit
// consecutive banks). The row is read once: held in registers (VPL > 0) for dinp's second pass, or
// streamed again from L1/L2 (VPL = 0, long rows).
template <int VPL, bool kVec>
__global__ void __launch_bounds__(32 * kRowsPerBlock)
    layernorm_backward_bf16_kernel(bf16* dinp, const bf16* dres, float* partial, const bf16* dout,
                                   const bf16* inp, const bf16* weight, const float* mean,
                                   const float* rstd, int N, int C, int rows) {
  extern __shared__ float acc[];  // when partial != nullptr
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  const int groups = (C + 7) / 8;
  const int steps = VPL > 0 ? VPL : (groups + 31) / 32;
  const bool params = partial != nullptr;
  float* adw = acc + size_t(warp) * 16 * groups;
  float* adb = adw + 8 * groups;
  if (params)
    for (int g = lane; g < groups; g += 32)
#pragma unroll
      for (int j = 0; j < 8; j++) adw[j * groups + g] = adb[j * groups + g] = 0.0f;
  const int r0 = blockIdx.x * rows, r1 = min(N, r0 + rows);
  for (int n = r0 + warp; n < r1; n += nwarps) {
    const size_t off = size_t(n) * C;
    const bf16* x = inp + off;
    const bf16* dy = dout + off;
    const float m = mean[n], s = rstd[n];
    uint4 xcache[VPL > 0 ? VPL : 1], dycache[VPL > 0 ? VPL : 1];
    float g_sum = 0.0f, gx_sum = 0.0f;
#pragma unroll
    for (int k = 0; k < steps; k++) {
      const int g = k * 32 + lane, c = g * 8;
      if (c >= C) break;
      const int valid = kVec ? 8 : group_valid(c, C);
      const uint4 xr = load_group<kVec>(x + c, valid), dyr = load_group<kVec>(dy + c, valid);
      if constexpr (VPL > 0) {
        xcache[k] = xr;
        dycache[k] = dyr;
      }
      float fx[8], fdy[8];
      unpack8(fx, xr);
      unpack8(fdy, dyr);
      if (params) {
#pragma unroll
        for (int j = 0; j < 8; j++)
          if (j < valid) {
            adw[j * groups + g] += fdy[j] * (fx[j] - m) * s;
            adb[j * groups + g] += fdy[j];
          }
      }
      if (dinp != nullptr) {
        float w[8];
        unpack8(w, load_group<kVec>(weight + c, valid));
#pragma unroll
        for (int j = 0; j < 8; j++)
          if (j < valid) {
            const float gj = fdy[j] * w[j];
            g_sum += gj;
            gx_sum += gj * (fx[j] - m) * s;
          }
      }
    }
    if (dinp == nullptr) continue;
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
  if (!params) return;
  __syncthreads();
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const int at = (c & 7) * groups + (c >> 3);
    float sw = 0.0f, sb = 0.0f;
    for (int w = 0; w < nwarps; w++) {
      sw += acc[size_t(w) * 16 * groups + at];
      sb += acc[size_t(w) * 16 * groups + 8 * groups + at];
    }
    partial[size_t(blockIdx.x) * C + c] = sw;
    partial[(size_t(gridDim.x) + blockIdx.x) * C + c] = sb;
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

// Shared memory of the backward kernels above 48 KiB needs the opt-in (long rows: one warp per
// block then); the limit is the device's (227 KiB on an H100, 163 KiB on an A100).
template <typename K>
void allow_smem(K kernel, size_t bytes) {
  if (bytes > kBwdSmemDefault)
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)),
               "layernorm_backward");
}

template <int VPL, bool kVec>
void launch_ln_backward_bf16(bf16* dinp, const bf16* dres, float* partial, const bf16* dout,
                             const bf16* inp, const bf16* weight, const float* mean, const float* rstd,
                             int N, int C, int rows, int blocks, int warps, size_t smem, cudaStream_t s) {
  allow_smem(layernorm_backward_bf16_kernel<VPL, kVec>, smem);
  layernorm_backward_bf16_kernel<VPL, kVec><<<blocks, 32 * warps, smem, s>>>(dinp, dres, partial, dout, inp,
                                                                            weight, mean, rstd, N, C, rows);
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

size_t layernorm_backward_scratch_floats(int N, int C) {
  return 2 * size_t(ceil_div(std::max(N, 1), bwd_rows(N))) * size_t(C);
}

// The backward launchers' preconditions (both dtypes); false when there is nothing to compute.
static bool backward_has_work(const void* dinp, const float* dweight, const float* dbias, const void* dout, const void* inp,
                              const void* weight, const float* mean, const float* rstd, int N, int C,
                              const float* scratch, size_t scratch_floats) {
  BATON_KCHECK("layernorm_backward", N >= 0 && C > 0);
  if (N == 0) return false;
  BATON_KCHECK("layernorm_backward", dout && inp && mean && rstd);
  const bool params = dweight != nullptr || dbias != nullptr;
  if (dinp == nullptr && !params) return false;
  if (dinp != nullptr) BATON_KCHECK("layernorm_backward", weight != nullptr);
  if (params) {
    BATON_KCHECK("layernorm_backward", scratch != nullptr);
    BATON_KCHECK("layernorm_backward", scratch_floats >= layernorm_backward_scratch_floats(N, C));
  }
  return true;
}

void layernorm_backward(float* dinp, const float* dres, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int N, int C, float* scratch, size_t scratch_floats,
                        cudaStream_t s) {
  if (!backward_has_work(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, scratch, scratch_floats)) return;
  const bool params = dweight != nullptr || dbias != nullptr;
  const int rows = bwd_rows(N), blocks = ceil_div(N, rows);
  const size_t per_warp = 2 * size_t(C) * sizeof(float);
  const int warps = params ? bwd_warps(per_warp) : kRowsPerBlock;
  const size_t smem = params ? warps * per_warp : 0;
  const bool row_sums_fit_in_shared_memory = smem <= kBwdSmemMax;
  BATON_KCHECK("layernorm_backward", row_sums_fit_in_shared_memory);
  allow_smem(layernorm_backward_kernel, smem);
  layernorm_backward_kernel<<<blocks, 32 * warps, smem, s>>>(dinp, dres, params ? scratch : nullptr, dout, inp,
                                                              weight, mean, rstd, N, C, rows);
  check_launch("layernorm_backward");
  if (!params) return;
  layernorm_param_finish_kernel<<<ceil_div(C, 32), dim3(32, 8), 0, s>>>(dweight, dbias, scratch, blocks, C);
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
  if (!backward_has_work(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, scratch, scratch_floats)) return;
  const bool params = dweight != nullptr || dbias != nullptr;
  const int rows = bwd_rows(N), blocks = ceil_div(N, rows);
  const size_t per_warp = 16 * size_t(ceil_div(C, 8)) * sizeof(float);
  const int warps = params ? bwd_warps(per_warp) : kRowsPerBlock;
  const size_t smem = params ? warps * per_warp : 0;
  const bool row_sums_fit_in_shared_memory = smem <= kBwdSmemMax;
  BATON_KCHECK("layernorm_backward", row_sums_fit_in_shared_memory);
  float* partial = params ? scratch : nullptr;
  // nullptr counts as aligned (dinp, dres and weight are null in a parameters-only call).
  const bool vec = C % 8 == 0 && aligned16(dinp) && aligned16(dres) && aligned16(dout) && aligned16(inp) &&
                   aligned16(weight);
#define BATON_LN_BWD(VPL, VEC)                                                                        \
  launch_ln_backward_bf16<VPL, VEC>(dinp, dres, partial, dout, inp, weight, mean, rstd, N, C, rows, blocks, \
                                    warps, smem, s)
  if (!vec) {
    BATON_LN_BWD(0, false);
  } else {
    switch (vpl_for(C)) {
      case 1: BATON_LN_BWD(1, true); break;
      case 2: BATON_LN_BWD(2, true); break;
      case 3: BATON_LN_BWD(3, true); break;
      case 4: BATON_LN_BWD(4, true); break;
      case 6: BATON_LN_BWD(6, true); break;
      case kMaxVpl: BATON_LN_BWD(kMaxVpl, true); break;
      default: BATON_LN_BWD(0, true); break;
    }
  }
#undef BATON_LN_BWD
  check_launch("layernorm_backward");
  if (!params) return;
  layernorm_param_finish_kernel<<<ceil_div(C, 32), dim3(32, 8), 0, s>>>(dweight, dbias, scratch, blocks, C);
  check_launch("layernorm_backward");
}

}  // namespace baton::kernels
