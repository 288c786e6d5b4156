// CPU twin of kernels/flash_attention.cu: causal flash attention, fp32, with the kernels' tiling
// and loop order (Dao 2023, FlashAttention-2). See cpu_flash_attention.h for the layout.
//
// Forward (Algorithm 1, causal as in §3.1.1): for each query tile i (kFlashTileQ rows), stream the
// key/value tiles j <= i (tiles above the diagonal are skipped, the diagonal tile is masked key >
// query and key >= T); per row keep the running max m and sum l of the scores in the log2 domain
// (scores prescaled by log2(e)/sqrt(HS), exp2 as the kernels do) and the unnormalised output acc:
//   s = q.k * scale_log2, m' = max(m, max_c s_c), alpha = 2^(m - m'), p_c = 2^(s_c - m'),
//   l = alpha l + sum_c p_c, acc = alpha acc + sum_c p_c v_c.
// At the end O = acc / l and lse = (m + log2 l) ln 2 (natural log): the only saved state.
//
// Backward (Algorithm 2, §3.1.2, with the causal skipping): D_t = rowsum(dO_t o O_t); then the
// dK/dV pass, one owner per key tile j iterating the query tiles i >= j (recomputing S and P = 2^(S
// scale_log2 - lse log2 e)), dV += P^T dO, dP = dO V^T, dS = P o (dP - D), dK += dS^T Q; then the
// dQ pass, one owner per query tile i iterating the key tiles j <= i, dQ += dS K. dK and dQ get the
// 1/sqrt(HS) at the end. No accumulation crosses owners, so the order is fixed (deterministic) as
// in the kernels.
#include "backend/cpu/cpu_flash_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"

namespace baton {
namespace {

constexpr double kLog2e = 1.4426950408889634;
constexpr double kLn2 = 0.6931471805599453;

// The kernels' launchers compute these the same way (double, then rounded to float).
float softmax_scale(int HS) { return float(1.0 / std::sqrt(double(HS))); }
float softmax_scale_log2(int HS) { return float(kLog2e / std::sqrt(double(HS))); }

void check_shape(const char* op, int B, int T, int C, int NH) {
  BATON_ASSERT(B >= 0 && T > 0 && C > 0 && NH > 0 && C % NH == 0,
               "{}: bad shape B={} T={} C={} NH={} (C must be a multiple of NH)", op, B, T, C, NH);
}

inline float dot(const float* a, const float* b, int n) {
  float s = 0.0f;
  for (int d = 0; d < n; d++) s += a[d] * b[d];
  return s;
}

inline int num_tiles(int T, int tile) { return (T + tile - 1) / tile; }

}  // namespace

void cpu_flash_attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C,
                                 int NH) {
  static_assert(kFlashTileQ == kFlashTileK, "causal tile test below assumes square tiles");
  check_shape("cpu_flash_attention_forward", B, T, C, NH);
  const int HS = C / NH;
  const size_t C3 = size_t(3) * C;
  const float sl2 = softmax_scale_log2(HS);
  const int nq = num_tiles(T, kFlashTileQ);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
#pragma omp parallel
  {
    // Per query tile state (what one CTA keeps in registers): m, l, acc[rows, HS]; one score row.
    std::vector<float> m(kFlashTileQ), l(kFlashTileQ), acc(size_t(kFlashTileQ) * HS),
        s(kFlashTileK);
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
      for (int h = 0; h < NH; h++) {
        const float* q = qkv + size_t(b) * T * C3 + size_t(h) * HS;  // row t at q + t*3C
        const float* k = q + C;
        const float* v = q + 2 * C;
        float* o = out + size_t(b) * T * C + size_t(h) * HS;  // row t at o + t*C
        float* lrow = lse + (size_t(b) * NH + h) * T;
        for (int i = 0; i < nq; i++) {
          const int i0 = i * kFlashTileQ;
          const int rows = std::min(kFlashTileQ, T - i0);
          std::fill(m.begin(), m.end(), kNegInf);
          std::fill(l.begin(), l.end(), 0.0f);
          std::fill(acc.begin(), acc.end(), 0.0f);
          for (int j = 0; j <= i; j++) {  // causal: key tiles above the diagonal are skipped
            const int j0 = j * kFlashTileK;
            for (int r = 0; r < rows; r++) {
              const int t = i0 + r;
              const float* qt = q + size_t(t) * C3;
              // S row (log2 domain); masked inside the diagonal tile and past T.
              float mx = m[r];
              for (int c = 0; c < kFlashTileK; c++) {
                const int key = j0 + c;
                s[c] = (key > t || key >= T) ? kNegInf : dot(qt, k + size_t(key) * C3, HS) * sl2;
                mx = std::max(mx, s[c]);
              }
              // mx is finite: key j0 <= t is never masked.
              const float alpha = std::exp2(m[r] - mx);  // 0 on the first tile (m = -inf)
              float* a = acc.data() + size_t(r) * HS;
              for (int d = 0; d < HS; d++) a[d] *= alpha;
              float rowsum = 0.0f;
              for (int c = 0; c < kFlashTileK; c++) {
                const int key = j0 + c;
                if (key > t || key >= T) continue;  // p = 0
                const float p = std::exp2(s[c] - mx);
                rowsum += p;
                const float* vk = v + size_t(key) * C3;
                for (int d = 0; d < HS; d++) a[d] += p * vk[d];
              }
              l[r] = l[r] * alpha + rowsum;
              m[r] = mx;
            }
          }
          for (int r = 0; r < rows; r++) {
            const int t = i0 + r;
            const float inv = 1.0f / l[r];
            const float* a = acc.data() + size_t(r) * HS;
            float* ot = o + size_t(t) * C;
            for (int d = 0; d < HS; d++) ot[d] = a[d] * inv;
            lrow[t] = (m[r] + std::log2(l[r])) * float(kLn2);  // as the kernels: fp32
          }
        }
      }
    }
  }
}

void cpu_flash_attention_backward(float* dqkv, const float* dout, const float* out,
                                  const float* qkv, const float* lse, int B, int T, int C, int NH) {
  check_shape("cpu_flash_attention_backward", B, T, C, NH);
  const int HS = C / NH;
  const size_t C3 = size_t(3) * C;
  const float scale = softmax_scale(HS);
  const float sl2 = softmax_scale_log2(HS);
  const float log2e = float(kLog2e);
  const int nt = num_tiles(T, kFlashTileQ);
#pragma omp parallel
  {
    // D_t (the preprocessing kernel's output, scratch in the kernels), lse in the log2 domain,
    // and the per-tile accumulators one CTA owns.
    std::vector<float> Dv(T), lse2(T);
    std::vector<float> dk(size_t(kFlashTileK) * HS), dv(size_t(kFlashTileK) * HS), dq(HS);
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
      for (int h = 0; h < NH; h++) {
        const float* q = qkv + size_t(b) * T * C3 + size_t(h) * HS;
        const float* k = q + C;
        const float* v = q + 2 * C;
        const float* o = out + size_t(b) * T * C + size_t(h) * HS;
        const float* dO = dout + size_t(b) * T * C + size_t(h) * HS;
        const float* lrow = lse + (size_t(b) * NH + h) * T;
        float* dqh = dqkv + size_t(b) * T * C3 + size_t(h) * HS;
        float* dkh = dqh + C;
        float* dvh = dqh + 2 * C;
        // Preprocessing: D = rowsum(dO o O).
        for (int t = 0; t < T; t++) {
          Dv[t] = dot(dO + size_t(t) * C, o + size_t(t) * C, HS);
          lse2[t] = lrow[t] * log2e;
        }
        // dK/dV pass: the owner of key tile j visits query tiles i >= j.
        for (int j = 0; j < nt; j++) {
          const int j0 = j * kFlashTileK;
          const int keys = std::min(kFlashTileK, T - j0);
          std::fill(dk.begin(), dk.end(), 0.0f);
          std::fill(dv.begin(), dv.end(), 0.0f);
          for (int i = j; i < nt; i++) {
            const int i0 = i * kFlashTileQ;
            const int rows = std::min(kFlashTileQ, T - i0);
            for (int c = 0; c < keys; c++) {
              const int key = j0 + c;
              const float* kk = k + size_t(key) * C3;
              const float* vk = v + size_t(key) * C3;
              float* dkc = dk.data() + size_t(c) * HS;
              float* dvc = dv.data() + size_t(c) * HS;
              for (int r = 0; r < rows; r++) {
                const int t = i0 + r;
                if (key > t) continue;  // masked: P = 0, dS = 0
                const float* qt = q + size_t(t) * C3;
                const float* dOt = dO + size_t(t) * C;
                const float p = std::exp2(dot(qt, kk, HS) * sl2 - lse2[t]);
                const float dp = dot(dOt, vk, HS);
                const float ds = p * (dp - Dv[t]);
                for (int d = 0; d < HS; d++) {
                  dvc[d] += p * dOt[d];
                  dkc[d] += ds * qt[d];
                }
              }
            }
          }
          for (int c = 0; c < keys; c++) {
            float* dkt = dkh + size_t(j0 + c) * C3;
            float* dvt = dvh + size_t(j0 + c) * C3;
            for (int d = 0; d < HS; d++) {
              dkt[d] = dk[size_t(c) * HS + d] * scale;
              dvt[d] = dv[size_t(c) * HS + d];
            }
          }
        }
        // dQ pass: the owner of query tile i visits key tiles j <= i.
        for (int i = 0; i < nt; i++) {
          const int i0 = i * kFlashTileQ;
          const int rows = std::min(kFlashTileQ, T - i0);
          for (int r = 0; r < rows; r++) {
            const int t = i0 + r;
            const float* qt = q + size_t(t) * C3;
            const float* dOt = dO + size_t(t) * C;
            std::fill(dq.begin(), dq.end(), 0.0f);
            for (int j = 0; j <= i; j++) {
              const int j0 = j * kFlashTileK;
              for (int c = 0; c < kFlashTileK; c++) {
                const int key = j0 + c;
                if (key > t) break;  // masked (this also stops at T)
                const float* kk = k + size_t(key) * C3;
                const float p = std::exp2(dot(qt, kk, HS) * sl2 - lse2[t]);
                const float dp = dot(dOt, v + size_t(key) * C3, HS);
                const float ds = p * (dp - Dv[t]);
                for (int d = 0; d < HS; d++) dq[d] += ds * kk[d];
              }
            }
            float* dqt = dqh + size_t(t) * C3;
            for (int d = 0; d < HS; d++) dqt[d] = dq[d] * scale;
          }
        }
      }
    }
  }
}

}  // namespace baton
