// CpuBackend causal self-attention core (Vaswani et al. 2017 §3.2.1, with GPT's causal mask).
// qkv[B,T,3C] holds per token q[C] | k[C] | v[C]; head h uses columns h*HS..(h+1)*HS of each.
//   forward:  S = Q K^T (masked), P = softmax(S / sqrt(HS)) -> att[B,NH,T,T]; O = P V -> out
//   backward: dP = dO V^T, dS = P * (dP - rowsum(P * dP)) / sqrt(HS),
//             dQ = dS K, dK = dS^T Q, dV = P^T dO -> dqkv[B,T,3C] (overwritten)
// The (b, h) pairs are independent, so one OpenMP loop runs over them and each pair does its four
// (forward) or eight (backward) small products with a register-tiled kernel in this file. sgemm
// is not used here: OpenBLAS (pthread build) must not be called inside an OpenMP region, and
// B*NH serial sgemm calls on T x T x HS blocks are too small to thread well (measured: that
// variant's forward is ~1.3x slower on one thread, ~2x on two). The kernel also skips the masked
// half of every product, which sgemm cannot. The kernel is compiled three times
// (AVX-512, AVX2+FMA, baseline SSE2) and picked at run time, because the default build has no
// -march and would otherwise run 4-wide only.
// Deterministic: every output element is produced by one thread in a fixed order.
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

using cpu_detail::to_f32;

// Register tile: MR rows x NR columns of accumulators, chosen per instruction set so the tile fills
// the vector registers without spilling (6 x 8 floats: 12 of the 16 xmm registers; 6 x 16: 12 ymm;
// 8 x 32: 16 of the 32 zmm) — enough independent multiply-adds to cover their latency: 4-row tiles
// left the products at ~100 GFLOP/s on 2 AVX-512 cores, and were 1.13x (SSE2) to 1.3x (AVX-512)
// slower at T = 1024. Packed operands are padded to kPad columns, enough for every NR. A tile's rows
// change only which exact zeros of a causal operand are added (k past a row's end, or before its
// start), so every MR gives the same sums.
constexpr int kPad = 32;

inline int round_up(int x, int m) { return (x + m - 1) / m * m; }

// Which part of a product the causal mask leaves non-zero (i = row of C, j = column, k = inner).
// LOWER_TILES: only C[i, j <= i] is needed, so column tiles right of the diagonal are skipped
//   (S = Q K^T, dP = dO V^T); tiles on the diagonal also write some j > i entries, which callers
//   ignore.
// K_TO_ROW: A[i, k] = 0 for k > i, so the inner loop stops at the row block's end (O = P V,
//   dQ = dS K).
// K_FROM_ROW: A[i, k] = 0 for k < i, so the inner loop starts at the row block (dV = P^T dO,
//   dK = dS^T Q).
enum class Causal { LOWER_TILES, K_TO_ROW, K_FROM_ROW };

// C[M,N] = A[M,K] . B[K,N] (overwrite), all row-major; A(i,k) = kTransA ? A[k*lda+i] : A[i*lda+k].
// B must be readable (zero-padded by the caller) up to column round_up(N, NR); rows of A past M are
// clamped to M-1 and their results dropped. Only C[0:M, 0:N] is written.
template <int MR, int NR, bool kTransA, Causal kCausal>
[[gnu::always_inline]] inline void tile_gemm_impl(int M, int N, int K, const float* A, int lda,
                                                  const float* B, int ldb, float* C, int ldc) {
  for (int i0 = 0; i0 < M; i0 += MR) {
    int rows[MR];
    for (int r = 0; r < MR; r++) rows[r] = std::min(i0 + r, M - 1);
    int k0 = 0, k1 = K, jend = N;
    if constexpr (kCausal == Causal::K_TO_ROW) k1 = std::min(K, i0 + MR);
    if constexpr (kCausal == Causal::K_FROM_ROW) k0 = i0;
    if constexpr (kCausal == Causal::LOWER_TILES) jend = std::min(N, i0 + MR);
    const int mr = std::min(MR, M - i0);
    for (int j0 = 0; j0 < jend; j0 += NR) {
      float acc[MR][NR] = {};
      for (int k = k0; k < k1; k++) {
        const float* b = B + size_t(k) * ldb + j0;
        for (int r = 0; r < MR; r++) {
          const float a = kTransA ? A[size_t(k) * lda + rows[r]] : A[size_t(rows[r]) * lda + k];
#pragma omp simd
          for (int c = 0; c < NR; c++) acc[r][c] += a * b[c];
        }
      }
      const int nr = std::min(NR, N - j0);
      for (int r = 0; r < mr; r++) {
        float* crow = C + size_t(i0 + r) * ldc + j0;
        for (int c = 0; c < nr; c++) crow[c] = acc[r][c];
      }
    }
  }
}

// One instantiation per instruction set; always_inline pulls the body into each so it is compiled
// for that target. FMA changes rounding, so results are deterministic per machine, as sgemm's are.
template <bool kTransA, Causal kCausal>
[[gnu::target("avx512f,avx512vl,avx2,fma")]] void tile_gemm_avx512(int M, int N, int K,
                                                                   const float* A, int lda,
                                                                   const float* B, int ldb,
                                                                   float* C, int ldc) {
  tile_gemm_impl<8, 32, kTransA, kCausal>(M, N, K, A, lda, B, ldb, C, ldc);
}
template <bool kTransA, Causal kCausal>
[[gnu::target("avx2,fma")]] void tile_gemm_avx2(int M, int N, int K, const float* A, int lda,
                                                const float* B, int ldb, float* C, int ldc) {
  tile_gemm_impl<6, 16, kTransA, kCausal>(M, N, K, A, lda, B, ldb, C, ldc);
}

using cpu_detail::KernelIsa;

KernelIsa best_isa() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl"))
    return KernelIsa::AVX512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return KernelIsa::AVX2;
  return KernelIsa::BASE;
}
const KernelIsa kBestIsa = best_isa();
KernelIsa g_isa = kBestIsa;  // changed only by tests, between calls

template <bool kTransA, Causal kCausal>
void tile_gemm(int M, int N, int K, const float* A, int lda, const float* B, int ldb, float* C,
               int ldc) {
  switch (g_isa) {
    case KernelIsa::AVX512:
      return tile_gemm_avx512<kTransA, kCausal>(M, N, K, A, lda, B, ldb, C, ldc);
    case KernelIsa::AVX2:
      return tile_gemm_avx2<kTransA, kCausal>(M, N, K, A, lda, B, ldb, C, ldc);
    case KernelIsa::BASE:
      return tile_gemm_impl<6, 8, kTransA, kCausal>(M, N, K, A, lda, B, ldb, C, ldc);
  }
}

// dst[rows, ld_dst] <- src rows (stride ld_src) as fp32, `cols` columns; the padding of dst stays
// as it was (zero from allocation).
template <typename S>
inline void pack_rows(float* dst, int ld_dst, const S* src, size_t ld_src, int rows, int cols) {
  for (int t = 0; t < rows; t++)
    for (int i = 0; i < cols; i++) dst[size_t(t) * ld_dst + i] = to_f32(src[t * ld_src + i]);
}

// dst[cols, ld_dst] <- transpose of src rows (stride ld_src) as fp32.
template <typename S>
inline void pack_transposed(float* dst, int ld_dst, const S* src, size_t ld_src, int rows, int cols) {
  for (int t = 0; t < rows; t++)
    for (int i = 0; i < cols; i++) dst[size_t(i) * ld_dst + t] = to_f32(src[t * ld_src + i]);
}

// dst rows (stride ld_dst) <- src[rows, cols] (fp32, stride cols) rounded to bf16.
inline void unpack_rows(uint16_t* dst, size_t ld_dst, const float* src, int rows, int cols) {
  for (int t = 0; t < rows; t++)
    for (int i = 0; i < cols; i++) dst[t * ld_dst + i] = f32_to_bf16(src[size_t(t) * cols + i]);
}

void check_shape(const char* op, int B, int T, int C, int NH) {
  BATON_ASSERT(B >= 0 && T > 0 && C > 0 && NH > 0 && C % NH == 0,
               "{}: bad shape B={} T={} C={} NH={} (C must be a multiple of NH)", op, B, T, C, NH);
}

}  // namespace

namespace cpu_detail {
KernelIsa kernel_isa() { return g_isa; }
bool set_kernel_isa(KernelIsa isa) {
  if (int(isa) > int(kBestIsa)) return false;
  g_isa = isa;
  return true;
}
}  // namespace cpu_detail

namespace {

// Activations of type E: fp32, read and written in place; or bf16 (uint16_t bits), whose head
// slices are widened into the per-thread packed operands (Q and dO packed too) and whose outputs
// are computed into per-thread fp32 blocks and rounded once — the same products on the same
// values in the same order as the emulation's widened tensors, so the same bits, without its
// passes over fp32 copies of qkv and dqkv (~3 ms a GPT-2 bf16 step on 2 cores).
template <typename E>
constexpr bool kBf16 = std::is_same_v<E, uint16_t>;

template <typename E>
void forward(E* out, float* att, const E* qkv, int B, int T, int C, int NH) {
  check_shape("attention_forward", B, T, C, NH);
  const int HS = C / NH;
  const int Tp = round_up(T, kPad), HSp = round_up(HS, kPad);
  const size_t C3 = size_t(3) * C;
  const float scale = 1.0f / std::sqrt(float(HS));
#pragma omp parallel
  {
    // Per-thread packed operands, zero padded once: Kt[HS,Tp] (K transposed), Vp[T,HSp]; bf16 also
    // Q[T,HS] and the output block O[T,HS].
    std::vector<float> kt(size_t(HS) * Tp, 0.0f), vp(size_t(T) * HSp, 0.0f);
    std::vector<float> qs(kBf16<E> ? size_t(T) * HS : 0), os(kBf16<E> ? size_t(T) * HS : 0);
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
      for (int h = 0; h < NH; h++) {
        const E* q = qkv + size_t(b) * T * C3 + size_t(h) * HS;  // row t at q + t*3C
        const E* k = q + C;
        const E* v = q + 2 * C;
        float* a = att + (size_t(b) * NH + h) * T * T;  // [T,T]
        pack_transposed(kt.data(), Tp, k, C3, T, HS);
        pack_rows(vp.data(), HSp, v, C3, T, HS);
        const float* q32;
        int ldq;
        if constexpr (kBf16<E>) {
          pack_rows(qs.data(), HS, q, C3, T, HS);
          q32 = qs.data(), ldq = HS;
        } else {
          q32 = q, ldq = int(C3);
        }
        // a = Q K^T, unscaled, lower triangle (plus junk right of it inside diagonal tiles).
        tile_gemm<false, Causal::LOWER_TILES>(T, T, HS, q32, ldq, kt.data(), Tp, a, T);
        // Row softmax over t2 <= t of scale * a (cpu_math's vector exp and fixed-lane sum: the
        // same bits on every CPU); the masked part becomes exactly 0.
        for (int t = 0; t < T; t++) {
          float* row = a + size_t(t) * T;
          const float maxv = cpu_math::max_of(row, size_t(t) + 1);
          const float inv = float(1.0 / cpu_math::exp_sum_scaled(row, row, size_t(t) + 1, maxv, scale));
          for (int t2 = 0; t2 <= t; t2++) row[t2] *= inv;
          std::fill(row + t + 1, row + T, 0.0f);
        }
        // out[b, :, h*HS:(h+1)*HS] = P V
        E* o = out + size_t(b) * T * C + size_t(h) * HS;
        if constexpr (kBf16<E>) {
          tile_gemm<false, Causal::K_TO_ROW>(T, HS, T, a, T, vp.data(), HSp, os.data(), HS);
          unpack_rows(o, C, os.data(), T, HS);
        } else {
          tile_gemm<false, Causal::K_TO_ROW>(T, HS, T, a, T, vp.data(), HSp, o, C);
        }
      }
    }
  }
}

template <typename E>
void backward(E* dqkv, const E* dout, const E* qkv, const float* att, int B, int T, int C, int NH) {
  check_shape("attention_backward", B, T, C, NH);
  const int HS = C / NH;
  const int Tp = round_up(T, kPad), HSp = round_up(HS, kPad);
  const size_t C3 = size_t(3) * C;
  const float scale = 1.0f / std::sqrt(float(HS));
#pragma omp parallel
  {
    // Per-thread packed operands (zero padded once) and the two T x T gradient blocks; bf16 also
    // the three output blocks dQ, dK, dV [T,HS].
    std::vector<float> vt(size_t(HS) * Tp, 0.0f);
    std::vector<float> kp(size_t(T) * HSp, 0.0f), qp(size_t(T) * HSp, 0.0f),
        dop(size_t(T) * HSp, 0.0f);
    std::vector<float> dp(size_t(T) * T), ds(size_t(T) * T);
    std::vector<float> g(kBf16<E> ? size_t(3) * T * HS : 0);
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
      for (int h = 0; h < NH; h++) {
        const E* q = qkv + size_t(b) * T * C3 + size_t(h) * HS;
        const E* k = q + C;
        const E* v = q + 2 * C;
        const float* p = att + (size_t(b) * NH + h) * T * T;
        const E* dO = dout + size_t(b) * T * C + size_t(h) * HS;  // row t at dO + t*C
        E* dq = dqkv + size_t(b) * T * C3 + size_t(h) * HS;
        pack_transposed(vt.data(), Tp, v, C3, T, HS);
        pack_rows(kp.data(), HSp, k, C3, T, HS);
        pack_rows(qp.data(), HSp, q, C3, T, HS);
        pack_rows(dop.data(), HSp, dO, C, T, HS);
        // dP = dO V^T (lower triangle needed); bf16 reads dO from its packed copy.
        if constexpr (kBf16<E>)
          tile_gemm<false, Causal::LOWER_TILES>(T, T, HS, dop.data(), HSp, vt.data(), Tp, dp.data(), T);
        else
          tile_gemm<false, Causal::LOWER_TILES>(T, T, HS, dO, C, vt.data(), Tp, dp.data(), T);
        // Softmax backward, with the 1/sqrt(HS) of the forward folded in; dS = 0 above the
        // diagonal because the K_TO_ROW/K_FROM_ROW products below read it there.
        for (int t = 0; t < T; t++) {
          const float* prow = p + size_t(t) * T;
          const float* dprow = dp.data() + size_t(t) * T;
          float* dsrow = ds.data() + size_t(t) * T;
          const float dot = float(cpu_math::dot(prow, dprow, size_t(t) + 1));
          for (int t2 = 0; t2 <= t; t2++) dsrow[t2] = prow[t2] * (dprow[t2] - dot) * scale;
          std::fill(dsrow + t + 1, dsrow + T, 0.0f);
        }
        // dQ = dS K, dK = dS^T Q, dV = P^T dO: into dqkv (fp32) or the blocks, then rounded (bf16).
        float* d32[3];
        int ldd;
        if constexpr (kBf16<E>) {
          for (int i = 0; i < 3; i++) d32[i] = g.data() + size_t(i) * T * HS;
          ldd = HS;
        } else {
          for (int i = 0; i < 3; i++) d32[i] = dq + size_t(i) * C;
          ldd = int(C3);
        }
        tile_gemm<false, Causal::K_TO_ROW>(T, HS, T, ds.data(), T, kp.data(), HSp, d32[0], ldd);
        tile_gemm<true, Causal::K_FROM_ROW>(T, HS, T, ds.data(), T, qp.data(), HSp, d32[1], ldd);
        tile_gemm<true, Causal::K_FROM_ROW>(T, HS, T, p, T, dop.data(), HSp, d32[2], ldd);
        if constexpr (kBf16<E>)
          for (int i = 0; i < 3; i++) unpack_rows(dq + size_t(i) * C, C3, d32[i], T, HS);
      }
    }
  }
}

}  // namespace

void CpuOps::attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
  forward(out, att, qkv, B, T, C, NH);
}
void CpuOps::attention_forward(uint16_t* out, float* att, const uint16_t* qkv, int B, int T, int C, int NH) {
  forward(out, att, qkv, B, T, C, NH);
}
void CpuOps::attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int B, int T,
                                int C, int NH) {
  backward(dqkv, dout, qkv, att, B, T, C, NH);
}
void CpuOps::attention_backward(uint16_t* dqkv, const uint16_t* dout, const uint16_t* qkv, const float* att, int B,
                                int T, int C, int NH) {
  backward(dqkv, dout, qkv, att, B, T, C, NH);
}

}  // namespace baton
