// Causal attention (see attention.cuh). Per batch row b and head h:
//   forward:  S = Q K^T (full T x T product; the upper triangle is discarded by the softmax),
//             P = softmax((S - rowmax) / sqrt(HS)) over t2 <= t, exactly 0 above -> att,
//             O = P V -> out (P's zeros make the full product equal to the causal one).
//   backward: dP = dO V^T, dS = P (dP - rowsum(P dP)) / sqrt(HS) (0 above the diagonal),
//             dQ = dS K, dK = dS^T Q, dV = P^T dO -> dqkv (beta = 0: overwritten).
// The softmax kernels run one warp per row with a fixed reduction order: deterministic.
// Cost: twice the causal FLOPs in the GEMMs and O(T^2) memory; flash attention replaces this in
// the bf16 step (docs/cuda.md).
#include "kernels/attention.cuh"
#include "kernels/common.cuh"
#include "kernels/gemm.cuh"

namespace baton::kernels {
namespace {

constexpr int kWarpsPerBlock = 8;

__global__ void causal_softmax_forward_kernel(float* att, int rows, int T, float scale) {
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= rows) return;
  const int t = row % T;
  float* a = att + size_t(row) * T;
  float m = -INFINITY;
  for (int j = lane; j <= t; j += 32) m = fmaxf(m, a[j]);
  m = warp_max(m);
  float sum = 0.0f;
  for (int j = lane; j <= t; j += 32) {
    const float e = expf((a[j] - m) * scale);
    a[j] = e;
    sum += e;
  }
  const float inv = 1.0f / warp_sum(sum);
  for (int j = lane; j < T; j += 32) a[j] = j <= t ? a[j] * inv : 0.0f;
}

// ds (in place over dp) = p * (dp - sum_j p dp) * scale on j <= t, 0 above.
__global__ void causal_softmax_backward_kernel(float* dp, const float* att, int rows, int T,
                                               float scale) {
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= rows) return;
  const int t = row % T;
  const float* p = att + size_t(row) * T;
  float* d = dp + size_t(row) * T;
  float dot = 0.0f;
  for (int j = lane; j <= t; j += 32) dot += p[j] * d[j];
  dot = warp_sum(dot);
  for (int j = lane; j < T; j += 32) d[j] = j <= t ? p[j] * (d[j] - dot) * scale : 0.0f;
}

void check_shape(const char* op, int B, int T, int C, int NH) {
  BATON_KCHECK(op, B >= 0 && T >= 0 && C > 0 && NH > 0);
  BATON_KCHECK(op, C % NH == 0);
}

}  // namespace

void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH,
                       cublasHandle_t h, cudaStream_t s) {
  check_shape("attention_forward", B, T, C, NH);
  if (B == 0 || T == 0) return;
  BATON_KCHECK("attention_forward", out && att && qkv);
  const int HS = C / NH, C3 = 3 * C;
  const long long TT = (long long)T * T;
  const float scale = 1.0f / sqrtf(float(HS));
  for (int b = 0; b < B; b++) {
    const float* q = qkv + size_t(b) * T * C3;
    float* a = att + size_t(b) * NH * TT;
    // S[h] = Q_h K_h^T
    gemm_rm_strided_batched(h, false, true, T, T, HS, 1.0f, q, C3, HS, q + C, C3, HS, 0.0f, a, T,
                            TT, NH);
  }
  const int rows = B * NH * T;
  causal_softmax_forward_kernel<<<ceil_div(rows, kWarpsPerBlock), 32 * kWarpsPerBlock, 0, s>>>(
      att, rows, T, scale);
  check_launch("attention_forward");
  for (int b = 0; b < B; b++) {
    const float* v = qkv + size_t(b) * T * C3 + 2 * C;
    // O_h = P_h V_h into out[b, :, h*HS:(h+1)*HS]
    gemm_rm_strided_batched(h, false, false, T, HS, T, 1.0f, att + size_t(b) * NH * TT, T, TT, v,
                            C3, HS, 0.0f, out + size_t(b) * T * C, C, HS, NH);
  }
}

size_t attention_backward_scratch_floats(int T, int NH) { return size_t(NH) * T * T; }

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int B,
                        int T, int C, int NH, float* scratch, size_t scratch_floats,
                        cublasHandle_t h, cudaStream_t s) {
  check_shape("attention_backward", B, T, C, NH);
  if (B == 0 || T == 0) return;
  BATON_KCHECK("attention_backward", dqkv && dout && qkv && att && scratch);
  BATON_KCHECK("attention_backward", scratch_floats >= attention_backward_scratch_floats(T, NH));
  const int HS = C / NH, C3 = 3 * C;
  const long long TT = (long long)T * T;
  const float scale = 1.0f / sqrtf(float(HS));
  const int rows = NH * T;
  for (int b = 0; b < B; b++) {
    const float* q = qkv + size_t(b) * T * C3;
    const float* k = q + C;
    const float* v = q + 2 * C;
    const float* p = att + size_t(b) * NH * TT;
    const float* dO = dout + size_t(b) * T * C;
    float* dq = dqkv + size_t(b) * T * C3;
    float* dk = dq + C;
    float* dv = dq + 2 * C;
    // dP = dO V^T
    gemm_rm_strided_batched(h, false, true, T, T, HS, 1.0f, dO, C, HS, v, C3, HS, 0.0f, scratch, T,
                            TT, NH);
    causal_softmax_backward_kernel<<<ceil_div(rows, kWarpsPerBlock), 32 * kWarpsPerBlock, 0, s>>>(
        scratch, p, rows, T, scale);
    check_launch("attention_backward");
    // dQ = dS K;  dK = dS^T Q;  dV = P^T dO
    gemm_rm_strided_batched(h, false, false, T, HS, T, 1.0f, scratch, T, TT, k, C3, HS, 0.0f, dq,
                            C3, HS, NH);
    gemm_rm_strided_batched(h, true, false, T, HS, T, 1.0f, scratch, T, TT, q, C3, HS, 0.0f, dk, C3,
                            HS, NH);
    gemm_rm_strided_batched(h, true, false, T, HS, T, 1.0f, p, T, TT, dO, C, HS, 0.0f, dv, C3, HS,
                            NH);
  }
}

}  // namespace baton::kernels
