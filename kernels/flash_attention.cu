// Causal flash attention (Dao 2023, FlashAttention-2), fp32 SIMT and bf16 tensor-core kernels.
// See flash_attention.cuh for the contract; the CPU twin (src/backend/cpu/cpu_flash_attention.cpp)
// has the same tiles and loop order.
//
// Notation: a CTA owns a 64-row tile of queries (forward, dQ) or of keys (dK/dV); the other
// operand streams through shared memory in 64-row tiles. Tiles are square, so the causal test
// at tile granularity is "key tile j <= query tile i" (tiles above the diagonal are skipped,
// §3.1.1); inside the diagonal tile, and past T, elements are masked (key > query, key >= T,
// query >= T). Rows past T are zero-filled in shared memory and never stored.
// Scores are kept in the log2 domain: s = q.k * scale_log2 with scale_log2 = log2(e)/sqrt(HS),
// so the softmax uses exp2f; lse is stored in natural log: lse = (m + log2 l) * ln 2.
#include <cstdint>

#include "kernels/common.cuh"
#include "kernels/flash_attention.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "flash_attention.cu needs sm_80 or newer (mma.sync m16n8k16 bf16)"
#endif

namespace baton::kernels {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kBr = kFlashTileRows;  // query rows per tile
constexpr int kBc = kFlashTileKeys;  // keys per tile
static_assert(kBr == kBc, "the causal tile test assumes square tiles");
constexpr double kLog2e = 1.4426950408889634;
constexpr float kLn2 = 0.6931471805599453f;

// The same constants as the CPU twin (double, then rounded to float).
float softmax_scale(int HS) { return float(1.0 / std::sqrt(double(HS))); }
float softmax_scale_log2(int HS) { return float(kLog2e / std::sqrt(double(HS))); }

// ================================================================================================
// Shared device helpers
// ================================================================================================

// Preprocessing of the backward (FA2 Algorithm 2, §3.1.2): D_t = rowsum(dO_t o O_t),
// one warp per (b, h, t) row, fp32 sum in a fixed order (lane stride, then the xor tree).
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(bf16 x) { return __bfloat162float(x); }

// P of a raw score s = q.k recomputed from the forward's lse in the log2 domain (FA2 Algorithm 2).
__device__ __forceinline__ float p_from_lse2(float s, float sl2, float lse2) {
  return exp2f(s * sl2 - lse2);
}
// The backward's per-query inputs of row t: lse in the log2 domain and D; 0 past T (such rows are
// masked and never stored).
__device__ __forceinline__ float lse2_or_0(const float* lse, int bh, int T, int t) {
  return t < T ? lse[size_t(bh) * T + t] * float(kLog2e) : 0.0f;
}
__device__ __forceinline__ float D_or_0(const float* Drow, int bh, int T, int t) {
  return t < T ? Drow[size_t(bh) * T + t] : 0.0f;
}
// Both for the kBr queries of the tile at i0, into shared memory (the dK/dV kernels' columns).
template <int kThreads>
__device__ __forceinline__ void load_lse2_D_tile(float* sL2, float* sD, const float* lse,
                                                 const float* Drow, int bh, int T, int i0) {
  for (int x = threadIdx.x; x < kBr; x += kThreads) {
    const bool ok = i0 + x < T;
    sL2[x] = ok ? lse[size_t(bh) * T + i0 + x] * float(kLog2e) : 0.0f;
    sD[x] = ok ? Drow[size_t(bh) * T + i0 + x] : 0.0f;
  }
}

template <typename TT>
__global__ void __launch_bounds__(128)
    flash_bwd_rowdot_kernel(float* Dout, const TT* dout, const TT* out, int B, int T, int C,
                            int NH) {
  const int HS = C / NH;
  const long long row = (long long)blockIdx.x * 4 + (threadIdx.x >> 5);  // (b*NH + h)*T + t
  const int lane = threadIdx.x & 31;
  if (row >= (long long)B * NH * T) return;
  const int t = int(row % T);
  const long long bh = row / T;
  const int h = int(bh % NH), b = int(bh / NH);
  const size_t off = (size_t(b) * T + t) * C + size_t(h) * HS;
  float acc = 0.0f;
  for (int d = lane; d < HS; d += 32) acc += to_f32(dout[off + d]) * to_f32(out[off + d]);
  acc = warp_sum(acc);
  if (lane == 0) Dout[row] = acc;
}

// ================================================================================================
// fp32 path: SIMT FMA (the exactness test of the algorithm). 256 threads; thread tid works on tile
// row r = tid / 4 with sub = tid % 4: score columns c = sub + 4x (x < 16), output columns
// d = sub + 4y (y < HS/4). The 4 threads of a row are 4 consecutive lanes of one warp, so their
// row reductions are two xor shuffles and their private rows of sP need only __syncwarp.
// Padded row stride LD = D + 1 keeps the column-strided reads conflict-free.
// ================================================================================================

constexpr int kThreadsF32 = 256;

template <int D>
__device__ __forceinline__ void load_rows_f32(float* s, const float* base, size_t stride, int t0,
                                              int T) {
  constexpr int LD = D + 1;
  for (int idx = threadIdx.x; idx < kBr * D; idx += kThreadsF32) {
    const int r = idx / D, d = idx % D, t = t0 + r;
    s[r * LD + d] = t < T ? base[size_t(t) * stride + d] : 0.0f;
  }
}

template <int D>
__device__ __forceinline__ float dot_f32(const float* a, const float* b) {
  float s = 0.0f;
#pragma unroll 16
  for (int d = 0; d < D; d++) s += a[d] * b[d];
  return s;
}

// P and dS of one (query, key) pair (FA2 Algorithm 2): p = exp2(a.b sl2 - lse2) from the score
// rows a, b and dS = p (c.d - Dt) from the dP rows c, d (all rows of shared tiles); returns p.
// lse2 and Dt by reference: read where they are used, not held in registers over the dot products.
template <int D>
__device__ __forceinline__ float p_and_ds_f32(const float* a, const float* b, const float* c,
                                              const float* d, float sl2, const float& lse2,
                                              const float& Dt, float& ds) {
  const float p = p_from_lse2(dot_f32<D>(a, b), sl2, lse2);
  const float dp = dot_f32<D>(c, d);
  ds = p * (dp - Dt);
  return p;
}

// acc[y] += sum over c = 0..N-1, in order, of prow[c] * tile[c][sub + 4y]: this thread's output
// columns of a row of P (or dS) times an N-row shared tile of stride D + 1 (V, dO, Q or K).
template <int D, int N>
__device__ __forceinline__ void add_row_times_tile_f32(float (&acc)[D / 4], const float* prow,
                                                       const float* tile, int sub) {
  constexpr int LD = D + 1;
  for (int c = 0; c < N; c++) {
    const float p = prow[c];
#pragma unroll
    for (int y = 0; y < D / 4; y++) acc[y] += p * tile[c * LD + sub + 4 * y];
  }
}

template <int D>
constexpr size_t fwd_f32_smem() {
  return sizeof(float) * (size_t(3) * kBr * (D + 1) + size_t(kBr) * (kBc + 1));
}

// Forward, FA2 Algorithm 1 (§3.1.1) with the causal skipping: CTA (bh, query tile i).
template <int D>
__global__ void __launch_bounds__(kThreadsF32)
    flash_fwd_f32_kernel(float* out, float* lse, const float* qkv, int T, int C, int NH,
                         float sl2) {
  constexpr int LD = D + 1, LDP = kBc + 1, NY = D / 4;
  extern __shared__ float smem_f32[];
  float* sQ = smem_f32;       // [kBr][LD]
  float* sK = sQ + kBr * LD;  // [kBc][LD]
  float* sV = sK + kBc * LD;  // [kBc][LD]
  float* sP = sV + kBc * LD;  // [kBr][LDP]: P of the current tile, row r private to its 4 threads
  const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int i = gridDim.y - 1 - blockIdx.y;  // the longest (diagonal-most) query tiles first
  const int i0 = i * kBr;
  const size_t C3 = size_t(3) * C;
  const float* qb = qkv + size_t(b) * T * C3 + size_t(h) * D;
  const float* kb = qb + C;
  const float* vb = qb + 2 * C;
  const int r = threadIdx.x >> 2, sub = threadIdx.x & 3;
  const int row = i0 + r;  // this thread's query

  load_rows_f32<D>(sQ, qb, C3, i0, T);
  float m = -INFINITY, l = 0.0f;  // running max (log2 domain) and sum of the row
  float o[NY];
#pragma unroll
  for (int y = 0; y < NY; y++) o[y] = 0.0f;

  for (int j = 0; j <= i; j++) {  // causal: key tiles j > i are skipped
    const int j0 = j * kBc;
    __syncthreads();  // everyone is done with the previous sK/sV
    load_rows_f32<D>(sK, kb, C3, j0, T);
    load_rows_f32<D>(sV, vb, C3, j0, T);
    __syncthreads();
    // S row slice, log2 domain, masked.
    float s[kBc / 4];
    float mx = m;
#pragma unroll
    for (int x = 0; x < kBc / 4; x++) {
      const int c = sub + 4 * x, key = j0 + c;
      const float dot = dot_f32<D>(sQ + r * LD, sK + c * LD);
      s[x] = (key > row || key >= T) ? -INFINITY : dot * sl2;
      mx = fmaxf(mx, s[x]);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float msafe = mx == -INFINITY ? 0.0f : mx;  // a row with nothing unmasked yet
    const float alpha = exp2f(m - msafe);             // 0 on the first tile (m = -inf)
    float rs = 0.0f;
#pragma unroll
    for (int x = 0; x < kBc / 4; x++) {
      const float p = exp2f(s[x] - msafe);  // masked: exp2(-inf) = 0
      sP[r * LDP + sub + 4 * x] = p;
      rs += p;
    }
    rs += __shfl_xor_sync(0xffffffffu, rs, 1);
    rs += __shfl_xor_sync(0xffffffffu, rs, 2);
    l = l * alpha + rs;
    m = mx;
    __syncwarp();  // sP row r (written by its 4 lanes) visible to them
#pragma unroll
    for (int y = 0; y < NY; y++) o[y] *= alpha;
    add_row_times_tile_f32<D, kBc>(o, sP + r * LDP, sV, sub);  // O += P V
    __syncwarp();  // reads of sP row r done before the next tile overwrites it
  }
  if (row < T) {
    const float inv = 1.0f / l;
    float* orow = out + (size_t(b) * T + row) * C + size_t(h) * D;
#pragma unroll
    for (int y = 0; y < NY; y++) orow[sub + 4 * y] = o[y] * inv;
    if (sub == 0) lse[size_t(bh) * T + row] = (m + log2f(l)) * kLn2;
  }
}

template <int D>
constexpr size_t bwd_dkdv_f32_smem() {
  return sizeof(float) * (size_t(4) * kBr * (D + 1) + size_t(kBc) * (kBr + 1) + 2 * kBr);
}

// Backward dK/dV, FA2 Algorithm 2 (§3.1.2, parallel over key tiles as §3.2): CTA (bh, key tile j)
// owns dK_j, dV_j and visits the query
// tiles i >= j. Thread row r is key j0 + r here; its score columns are queries.
template <int D>
__global__ void __launch_bounds__(kThreadsF32)
    flash_bwd_dkdv_f32_kernel(float* dqkv, const float* dout, const float* qkv, const float* lse,
                              const float* Drow, int T, int C, int NH, float sl2, float scale) {
  constexpr int LD = D + 1, LDP = kBr + 1, NY = D / 4;
  extern __shared__ float smem_f32[];
  float* sK = smem_f32;         // [kBc][LD]
  float* sV = sK + kBc * LD;    // [kBc][LD]
  float* sQ = sV + kBc * LD;    // [kBr][LD]
  float* sdO = sQ + kBr * LD;   // [kBr][LD]
  float* sP = sdO + kBr * LD;   // [kBc][LDP]: P^T, then dS^T, of key row r (private to its lanes)
  float* sL2 = sP + kBc * LDP;  // [kBr] lse * log2(e) of the query tile
  float* sD = sL2 + kBr;        // [kBr] D of the query tile
  const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int j = blockIdx.y;  // small j visit the most query tiles: launched first
  const int j0 = j * kBc;
  const int nt = gridDim.y;
  const size_t C3 = size_t(3) * C;
  const float* qb = qkv + size_t(b) * T * C3 + size_t(h) * D;
  const float* kb = qb + C;
  const float* vb = qb + 2 * C;
  const float* dob = dout + size_t(b) * T * C + size_t(h) * D;
  const int r = threadIdx.x >> 2, sub = threadIdx.x & 3;
  const int key = j0 + r;

  load_rows_f32<D>(sK, kb, C3, j0, T);
  load_rows_f32<D>(sV, vb, C3, j0, T);
  float dk[NY], dv[NY];
#pragma unroll
  for (int y = 0; y < NY; y++) dk[y] = dv[y] = 0.0f;

  for (int i = j; i < nt; i++) {  // causal: query tiles i < j see none of these keys
    const int i0 = i * kBr;
    __syncthreads();
    load_rows_f32<D>(sQ, qb, C3, i0, T);
    load_rows_f32<D>(sdO, dob, size_t(C), i0, T);
    load_lse2_D_tile<kThreadsF32>(sL2, sD, lse, Drow, bh, T, i0);
    __syncthreads();
    // P^T and dS^T for key row r against queries c = sub + 4x.
    float ds[kBr / 4];
#pragma unroll
    for (int x = 0; x < kBr / 4; x++) {
      const int c = sub + 4 * x, query = i0 + c;
      float p = 0.0f, dsv = 0.0f;
      if (!(key > query || query >= T || key >= T))
        p = p_and_ds_f32<D>(sK + r * LD, sQ + c * LD, sV + r * LD, sdO + c * LD, sl2, sL2[c], sD[c],
                            dsv);
      sP[r * LDP + c] = p;
      ds[x] = dsv;
    }
    __syncwarp();
    add_row_times_tile_f32<D, kBr>(dv, sP + r * LDP, sdO, sub);  // dV += P^T dO
    __syncwarp();
#pragma unroll
    for (int x = 0; x < kBr / 4; x++) sP[r * LDP + sub + 4 * x] = ds[x];
    __syncwarp();
    add_row_times_tile_f32<D, kBr>(dk, sP + r * LDP, sQ, sub);  // dK += dS^T Q
  }
  if (key < T) {
    float* dkrow = dqkv + (size_t(b) * T + key) * C3 + C + size_t(h) * D;
    float* dvrow = dkrow + C;
#pragma unroll
    for (int y = 0; y < NY; y++) {
      dkrow[sub + 4 * y] = dk[y] * scale;
      dvrow[sub + 4 * y] = dv[y];
    }
  }
}

template <int D>
constexpr size_t bwd_dq_f32_smem() {
  return sizeof(float) * (size_t(4) * kBr * (D + 1) + size_t(kBr) * (kBc + 1));
}

// Backward dQ: CTA (bh, query tile i) owns dQ_i and visits the key tiles j <= i, recomputing P and
// dS (instead of the atomic dQ adds of FA2 §3.2: one owner per query tile, deterministic).
template <int D>
__global__ void __launch_bounds__(kThreadsF32)
    flash_bwd_dq_f32_kernel(float* dqkv, const float* dout, const float* qkv, const float* lse,
                            const float* Drow, int T, int C, int NH, float sl2, float scale) {
  constexpr int LD = D + 1, LDP = kBc + 1, NY = D / 4;
  extern __shared__ float smem_f32[];
  float* sQ = smem_f32;        // [kBr][LD]
  float* sdO = sQ + kBr * LD;  // [kBr][LD]
  float* sK = sdO + kBr * LD;  // [kBc][LD]
  float* sV = sK + kBc * LD;   // [kBc][LD]
  float* sP = sV + kBc * LD;   // [kBr][LDP]: dS of query row r (private to its lanes)
  const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int i = gridDim.y - 1 - blockIdx.y;
  const int i0 = i * kBr;
  const size_t C3 = size_t(3) * C;
  const float* qb = qkv + size_t(b) * T * C3 + size_t(h) * D;
  const float* kb = qb + C;
  const float* vb = qb + 2 * C;
  const float* dob = dout + size_t(b) * T * C + size_t(h) * D;
  const int r = threadIdx.x >> 2, sub = threadIdx.x & 3;
  const int row = i0 + r;
  const float l2 = lse2_or_0(lse, bh, T, row), Dr = D_or_0(Drow, bh, T, row);

  load_rows_f32<D>(sQ, qb, C3, i0, T);
  load_rows_f32<D>(sdO, dob, size_t(C), i0, T);
  float dq[NY];
#pragma unroll
  for (int y = 0; y < NY; y++) dq[y] = 0.0f;

  for (int j = 0; j <= i; j++) {
    const int j0 = j * kBc;
    __syncthreads();
    load_rows_f32<D>(sK, kb, C3, j0, T);
    load_rows_f32<D>(sV, vb, C3, j0, T);
    __syncthreads();
#pragma unroll
    for (int x = 0; x < kBc / 4; x++) {
      const int c = sub + 4 * x, key = j0 + c;
      float dsv = 0.0f;
      if (!(key > row || key >= T || row >= T))
        p_and_ds_f32<D>(sQ + r * LD, sK + c * LD, sdO + r * LD, sV + c * LD, sl2, l2, Dr, dsv);
      sP[r * LDP + c] = dsv;
    }
    __syncwarp();
    add_row_times_tile_f32<D, kBc>(dq, sP + r * LDP, sK, sub);  // dQ += dS K
    __syncwarp();
  }
  if (row < T) {
    float* dqrow = dqkv + (size_t(b) * T + row) * C3 + size_t(h) * D;
#pragma unroll
    for (int y = 0; y < NY; y++) dqrow[sub + 4 * y] = dq[y] * scale;
  }
}

// ================================================================================================
// bf16 path: tensor cores, mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (PTX ISA, "Matrix
// fragments for mma.m16n8k16 with floating point type"). 4 warps (128 threads); warp w owns the 16
// rows 16w..16w+15 of the CTA's tile. With lane = threadIdx.x % 32, g = lane / 4 (groupID) and
// tq = lane % 4 (threadID_in_group), each thread holds
//   A (16x16, row-major), 4 .b32 registers of two bf16 each (lower index in the low half):
//     a[0] = A[g  ][2tq, 2tq+1]    a[1] = A[g+8][2tq, 2tq+1]
//     a[2] = A[g  ][2tq+8, +9]     a[3] = A[g+8][2tq+8, +9]
//   B (16x8, "col": k x n), 2 .b32 registers:
//     b[0] = B[2tq, 2tq+1][g]      b[1] = B[2tq+8, 2tq+9][g]
//   C/D (16x8 fp32), 4 registers:
//     c[0], c[1] = C[g][2tq, 2tq+1]    c[2], c[3] = C[g+8][2tq, 2tq+1]
// The C fragments of n-tiles 2kc and 2kc+1 are exactly the A fragment of k-chunk kc (c[0..1] ->
// a[0], c[2..3] -> a[1] of n-tile 2kc; a[2], a[3] from n-tile 2kc+1), which feeds P (and dS^T)
// into the next product without shared memory (FA2 §3.3: Q is split across warps).
//
// Operands come from shared memory through ldmatrix (PTX ISA, "Warp-level matrix load instruction:
// ldmatrix"): one .x4 loads four 8x8 b16 matrices, lanes 8q..8q+7 giving the row addresses of
// matrix q, and hands lane (g, tq) the register M_q[g][2tq, 2tq+1] (without .trans) or
// M_q[2tq, 2tq+1][g] (.trans): the fragment pieces above. Hence two address patterns for a 16x16
// block at (r0, c0) of a tile, matrices 0..3 at
//   pattern X: (r0, c0), (r0+8, c0), (r0, c0+8), (r0+8, c0+8): A from a row-major [m][k] tile;
//              B from a [k][n] tile with .trans (b[0], b[1] of n-tile c0, then of c0+8);
//   pattern Y: (r0, c0), (r0, c0+8), (r0+8, c0), (r0+8, c0+8): B from an [n][k] tile (b[0], b[1]
//              of n-tile r0, then of r0+8); A from a [k][m] tile with .trans.
// Every tile is stored once, row-major as it is in global memory; .trans serves the transposed
// operands (V in P V, dO in P^T dO, Q in dS^T Q, K and dS^T in dS K).
//
// Shared-memory layout: rows padded to LD = D + 8 bf16 (16 bytes more), not XOR-swizzled. Every
// access is a 16-byte row chunk (ldmatrix rows, cp.async stores), and the row stride is then an
// odd number of 16-byte units (D / 8 + 1, D / 8 even), so the 8 rows of an ldmatrix phase fall on
// 8 distinct 16-byte bank groups of the 128-byte bank cycle: conflict-free for every D, column
// offset and .trans, with plain index arithmetic (the emulator counts the bank conflicts of every
// ldmatrix phase; tests/emu asserts none). The price is 8/D more shared memory than a swizzle.
// Global -> shared copies are cp.async.cg (16 bytes, L2 only: the tiles are reused from shared
// memory, not L1), double-buffered: the next K/V (forward) or Q/dO (backward) tile is issued
// before the current one is computed, which needs only cp.async.wait_group 1 (PTX ISA, "cp.async").
// ================================================================================================

constexpr int kThreadsBf16 = 128;

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  // .x = lo goes to the low 16 bits (the fragment's lower-index element).
  return uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(lo))) |
         (uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(hi))) << 16);
}
// c += A B for one m16n8k16 tile (fragments as above).
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The shared-window address of p: the .shared operand of ldmatrix and cp.async.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// This lane's row address for the 16x16 block at (r0, c0) of the tile at shared address base
// (row stride ld bf16), patterns X and Y above.
__device__ __forceinline__ uint32_t ldsm_addr_x(uint32_t base, int ld, int r0, int c0, int lane) {
  return base + 2u * uint32_t((r0 + (lane & 15)) * ld + c0 + (lane >> 4) * 8);
}
__device__ __forceinline__ uint32_t ldsm_addr_y(uint32_t base, int ld, int r0, int c0, int lane) {
  return base + 2u * uint32_t((r0 + (lane & 7) + (lane >> 4) * 8) * ld + c0 + (lane & 8));
}
// A fragment, rows m0.., k0..: from a row-major [m][k] tile, or (_t) from a [k][m] tile.
__device__ __forceinline__ void lds_a(uint32_t (&a)[4], uint32_t base, int ld, int m0, int k0,
                                      int lane) {
  ldsm_x4(a, ldsm_addr_x(base, ld, m0, k0, lane));
}
__device__ __forceinline__ void lds_a_t(uint32_t (&a)[4], uint32_t base, int ld, int m0, int k0,
                                        int lane) {
  ldsm_x4_trans(a, ldsm_addr_y(base, ld, k0, m0, lane));
}
// B fragments of n-tiles n0 and n0 + 8 over k0..k0+15, {b0, b1} of each: from an [n][k] tile, or
// (_t) from a [k][n] tile.
__device__ __forceinline__ void lds_b2(uint32_t (&b)[4], uint32_t base, int ld, int n0, int k0,
                                       int lane) {
  ldsm_x4(b, ldsm_addr_y(base, ld, n0, k0, lane));
}
__device__ __forceinline__ void lds_b2_t(uint32_t (&b)[4], uint32_t base, int ld, int n0, int k0,
                                         int lane) {
  ldsm_x4_trans(b, ldsm_addr_x(base, ld, k0, n0, lane));
}

// cp.async.cg of 16 bytes; src_bytes < 16 zero-fills the rest (0: a row past T, nothing read).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Waits until at most N of this thread's newest cp.async groups are pending; other threads'
// copies are visible only after a barrier that follows their waits.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
// kBr rows of D bf16 from rows t0.. of a [T, stride] matrix into a row-major shared tile of row
// stride D + 8, one 16-byte cp.async per chunk; rows >= T are zero-filled (the source address is
// clamped to row 0, which exists, and nothing is read from it).
template <int D>
__device__ __forceinline__ void cp_async_rows(bf16* s, const bf16* base, size_t stride, int t0,
                                              int T) {
  constexpr int LD = D + 8, VPR = D / 8;
  for (int idx = threadIdx.x; idx < kBr * VPR; idx += kThreadsBf16) {
    const int r = idx / VPR, cv = idx % VPR, t = t0 + r;
    const bool ok = t < T;
    cp_async16(smem_addr(s + r * LD + cv * 8), base + size_t(ok ? t : 0) * stride + cv * 8,
               ok ? 16 : 0);
  }
}

// The A fragment of k-chunk kc from the C fragments of n-tiles 2kc and 2kc+1 (rounded to bf16).
__device__ __forceinline__ void c_to_a_frag(uint32_t (&a)[4], const float (&c0)[4],
                                            const float (&c1)[4]) {
  a[0] = pack_bf16(c0[0], c0[1]);
  a[1] = pack_bf16(c0[2], c0[3]);
  a[2] = pack_bf16(c1[0], c1[1]);
  a[3] = pack_bf16(c1[2], c1[3]);
}
// The tile column of element e of n-tile nt's C fragment (its row is g for e < 2, g + 8 else).
__device__ __forceinline__ int c_frag_col(int nt, int e, int tq) {
  return nt * 8 + 2 * tq + (e & 1);
}

template <int N>
__device__ __forceinline__ void zero_frags(float (&acc)[N][4]) {
#pragma unroll
  for (int n = 0; n < N; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
}
// acc[nt] += A B for the warp's rows m0..m0+15 and n-tiles nt < NT over k < 16 KC: A from a
// row-major [m][k] tile, B from an [n][k] tile, both at shared addresses with row stride ld.
template <int KC, int NT>
__device__ __forceinline__ void mma_tile_tile(float (&acc)[NT][4], uint32_t sA, uint32_t sB,
                                              int ld, int m0, int lane) {
  static_assert(NT % 2 == 0, "ldmatrix.x4 loads two n-tiles");
#pragma unroll
  for (int kc = 0; kc < KC; kc++) {
    uint32_t a[4];
    lds_a(a, sA, ld, m0, kc * 16, lane);
#pragma unroll
    for (int nt = 0; nt < NT; nt += 2) {
      uint32_t b[4];
      lds_b2(b, sB, ld, nt * 8, kc * 16, lane);
      mma_bf16(acc[nt], a, b[0], b[1]);
      mma_bf16(acc[nt + 1], a, b[2], b[3]);
    }
  }
}
// acc[dn] += P B with P the fp32 C fragments p[0..NP) of the previous product (P, P^T or dS^T:
// k = its columns), rounded to bf16 A fragments two n-tiles at a time; B from a [k][n] shared tile
// (V, dO or Q: row = token = k) with row stride ld, through ldmatrix .trans.
template <int NP, int DN>
__device__ __forceinline__ void mma_frags_tile(float (&acc)[DN][4], const float (&p)[NP][4],
                                               uint32_t sB, int ld, int lane) {
  static_assert(NP % 2 == 0 && DN % 2 == 0, "two C fragments per A fragment, two n-tiles per B");
#pragma unroll
  for (int kc = 0; kc < NP / 2; kc++) {
    uint32_t pa[4];
    c_to_a_frag(pa, p[2 * kc], p[2 * kc + 1]);
#pragma unroll
    for (int dn = 0; dn < DN; dn += 2) {
      uint32_t b[4];
      lds_b2_t(b, sB, ld, dn * 8, kc * 16, lane);
      mma_bf16(acc[dn], pa, b[0], b[1]);
      mma_bf16(acc[dn + 1], pa, b[2], b[3]);
    }
  }
}

template <int D>
constexpr size_t tile_bytes() {
  return sizeof(bf16) * size_t(kBr) * (D + 8);
}
// Q, and K and V double-buffered.
template <int D>
constexpr size_t fwd_bf16_smem() {
  return 5 * tile_bytes<D>();
}

// Forward, FA2 Algorithm 1 (§3.1.1, causal masking there): CTA (bh, query tile i); warp w: queries
// i0+16w.., i.e. this thread's rows row0 = i0+16w+g and row1 = row0+8. S, P and O live in
// registers as C fragments; Q's A fragments are loaded once. K/V tile j+1 is copied (cp.async)
// while tile j is computed.
template <int D>
__global__ void __launch_bounds__(kThreadsBf16)
    flash_fwd_bf16_kernel(bf16* out, float* lse, const bf16* qkv, int T, int C, int NH, float sl2) {
  constexpr int LD = D + 8, KC = D / 16, NT = kBc / 8, DN = D / 8, TILE = kBr * LD;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* sQ = reinterpret_cast<bf16*>(smem_raw);  // [kBr][LD]
  bf16* sK = sQ + TILE;                          // [2][kBc][LD]
  bf16* sV = sK + 2 * TILE;                      // [2][kBc][LD]
  const uint32_t aQ = smem_addr(sQ), aK = smem_addr(sK), aV = smem_addr(sV);
  const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int i = gridDim.y - 1 - blockIdx.y;
  const int i0 = i * kBr;
  const size_t C3 = size_t(3) * C;
  const bf16* qb = qkv + size_t(b) * T * C3 + size_t(h) * D;
  const bf16* kb = qb + C;
  const bf16* vb = qb + 2 * C;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
  const int row0 = i0 + warp * 16 + g, row1 = row0 + 8;

  // Two cp.async groups: Q, then K/V tile 0 (still in flight while Q's fragments are loaded).
  cp_async_rows<D>(sQ, qb, C3, i0, T);
  cp_async_commit();
  cp_async_rows<D>(sK, kb, C3, 0, T);
  cp_async_rows<D>(sV, vb, C3, 0, T);
  cp_async_commit();
  cp_async_wait<1>();
  __syncthreads();
  uint32_t qa[KC][4];
#pragma unroll
  for (int kc = 0; kc < KC; kc++) lds_a(qa[kc], aQ, LD, warp * 16, kc * 16, lane);

  float o[DN][4];
  zero_frags(o);
  // Running max (log2 domain) of rows row0, row1 (the same in the 4 lanes of a quad) and this
  // lane's partial row sums (its 16 columns per tile; the quad is summed once at the end).
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  for (int j = 0; j <= i; j++) {  // causal: key tiles j > i are skipped
    const int j0 = j * kBc, buf = j & 1;
    if (j < i) {
      // Tile j+1 into the other buffer: its last readers (tile j-1) passed the barrier that
      // ended iteration j-1.
      cp_async_rows<D>(sK + (buf ^ 1) * TILE, kb, C3, j0 + kBc, T);
      cp_async_rows<D>(sV + (buf ^ 1) * TILE, vb, C3, j0 + kBc, T);
      cp_async_commit();
      cp_async_wait<1>();  // every group but the newest: tile j is here
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // every thread's copies of tile j are visible
    const uint32_t kt = aK + 2u * uint32_t(buf * TILE), vt = aV + 2u * uint32_t(buf * TILE);
    // S = Q K^T: B[k = d][n = key] = K[key][d], an [n][k] tile.
    float s[NT][4];
    zero_frags(s);
#pragma unroll
    for (int kc = 0; kc < KC; kc++)
#pragma unroll
      for (int nt = 0; nt < NT; nt += 2) {
        uint32_t kf[4];
        lds_b2(kf, kt, LD, nt * 8, kc * 16, lane);
        mma_bf16(s[nt], qa[kc], kf[0], kf[1]);
        mma_bf16(s[nt + 1], qa[kc], kf[2], kf[3]);
      }
    // Scale to the log2 domain and mask; row max over the tile (own 16 columns, then the quad).
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int key = j0 + c_frag_col(nt, e, tq), row = e < 2 ? row0 : row1;
        s[nt][e] = (key > row || key >= T) ? -INFINITY : s[nt][e] * sl2;
        mx[e >> 1] = fmaxf(mx[e >> 1], s[nt][e]);
      }
    float alpha[2], msafe[2];
#pragma unroll
    for (int q = 0; q < 2; q++) {
      mx[q] = fmaxf(mx[q], __shfl_xor_sync(0xffffffffu, mx[q], 1));
      mx[q] = fmaxf(mx[q], __shfl_xor_sync(0xffffffffu, mx[q], 2));
      msafe[q] = mx[q] == -INFINITY ? 0.0f : mx[q];
      alpha[q] = exp2f(m[q] - msafe[q]);  // 0 on the first tile
      m[q] = mx[q];
    }
    float rs[2] = {0.0f, 0.0f};
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        s[nt][e] = exp2f(s[nt][e] - msafe[e >> 1]);  // P (unnormalised); masked -> 0
        rs[e >> 1] += s[nt][e];
      }
    l[0] = l[0] * alpha[0] + rs[0];
    l[1] = l[1] * alpha[1] + rs[1];
#pragma unroll
    for (int dn = 0; dn < DN; dn++) {
      o[dn][0] *= alpha[0];
      o[dn][1] *= alpha[0];
      o[dn][2] *= alpha[1];
      o[dn][3] *= alpha[1];
    }
    // O += P V: P from registers (bf16), B[k = key][n = d] = V[key][d], a [k][n] tile (.trans).
    mma_frags_tile(o, s, vt, LD, lane);
    if (j + 1 < i) __syncthreads();  // buffer buf is refilled (tile j+2) by iteration j+1
  }
#pragma unroll
  for (int q = 0; q < 2; q++) {
    l[q] += __shfl_xor_sync(0xffffffffu, l[q], 1);
    l[q] += __shfl_xor_sync(0xffffffffu, l[q], 2);
  }
  const int rows[2] = {row0, row1};
#pragma unroll
  for (int q = 0; q < 2; q++) {
    if (rows[q] >= T) continue;
    const float inv = 1.0f / l[q];
    bf16* orow = out + (size_t(b) * T + rows[q]) * C + size_t(h) * D;
#pragma unroll
    for (int dn = 0; dn < DN; dn++)
      *reinterpret_cast<__nv_bfloat162*>(orow + dn * 8 + 2 * tq) =
          __floats2bfloat162_rn(o[dn][2 * q] * inv, o[dn][2 * q + 1] * inv);
    if (tq == 0) lse[size_t(bh) * T + rows[q]] = (m[q] + log2f(l[q])) * kLn2;
  }
}

// The backward's dQ (FA2 Algorithm 2 line 21, dQ_i += dS_ij K_j, which FA2 §3.2 accumulates with
// atomic adds across the CTAs of the key tiles j): here CTA j writes its dS_ij K_j for every query
// tile i >= j to its own fp32 slot of a scratch array, one slot per (i, j) at or below the
// diagonal, packed [B*NH][nt(nt+1)/2 slots, slot (i, j) at i(i+1)/2 + j][kBr][HS], and a small
// kernel sums the slots of each query tile in the order j = 0, 1, ..., i: deterministic (every sum
// in a fixed order, no atomics) with the 5 GEMMs of Algorithm 2 in the main loop and Q and dO
// staged once. The price is memory: (nt + 1) / 2 times an fp32 dQ (GPT-2 124M, T 1024: 8.5x,
// 27 MB per sequence), written once and read once.
inline size_t dq_partial_floats(int B, int T, int NH, int HS) {
  if (B <= 0 || T <= 0 || NH <= 0 || HS <= 0) return 0;
  const size_t nt = (size_t(T) + kBr - 1) / kBr;
  return size_t(B) * size_t(NH) * (nt * (nt + 1) / 2) * kBr * size_t(HS);
}
// Where it starts in the backward's scratch: after D (B*NH*T floats), rounded up to 16 bytes.
inline size_t dq_partial_offset(int B, int T, int NH) {
  return (size_t(B) * size_t(NH) * size_t(T) + 3) / 4 * 4;
}

// K, V, Q and dO double-buffered, dS^T, lse2 and D double-buffered.
template <int D>
constexpr size_t bwd_bf16_smem() {
  return 6 * tile_bytes<D>() + sizeof(bf16) * size_t(kBc) * (kBr + 8) + sizeof(float) * 4 * kBr;
}

// Backward, FA2 Algorithm 2 (§3.1.2; parallel over key tiles, §3.2): CTA (bh, key tile j) owns
// dK_j, dV_j and visits the query tiles i >= j (Q_i, dO_i copied while tile i-1 is computed). Warp
// w owns keys j0+16w.. (C-fragment rows key0 = j0+16w+g, key1 = key0+8) for the transposed
// products, so that the owned rows are the MMA's m dimension:
//   S^T = K Q^T, P^T = exp2(S^T sl2 - lse2[query]) (Algorithm 2's recomputation from the saved
//   logsumexp), dV += P^T dO, dP^T = V dO^T, dS^T = P^T o (dP^T - D[query]), dK += dS^T Q,
// then dS^T goes to shared memory (bf16, the values the dK product used) and warp w takes queries
// i0+16w.. for the fifth product dQ_i += dS K_j, written to slot (i, j) of dq_part (see
// dq_partial_floats). dK is scaled by 1/sqrt(HS) at the end, dQ by the reduction.
template <int D>
__global__ void __launch_bounds__(kThreadsBf16)
    flash_bwd_bf16_kernel(bf16* dqkv, float* dq_part, const bf16* dout, const bf16* qkv,
                          const float* lse, const float* Drow, int T, int C, int NH, float sl2,
                          float scale) {
  constexpr int LD = D + 8, LDS = kBr + 8, KC = D / 16, NT = kBr / 8, DN = D / 8, TILE = kBr * LD;
  constexpr int DQN = DN < 8 ? DN : 8;  // dQ n-tiles per pass (64 columns: bounds the registers)
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* sK = reinterpret_cast<bf16*>(smem_raw);          // [kBc][LD]
  bf16* sV = sK + TILE;                                  // [kBc][LD]
  bf16* sQ = sV + TILE;                                  // [2][kBr][LD]
  bf16* sdO = sQ + 2 * TILE;                             // [2][kBr][LD]
  bf16* sdS = sdO + 2 * TILE;                            // [kBc][LDS]: dS^T, row = key
  float* sL2 = reinterpret_cast<float*>(sdS + kBc * LDS);  // [2][kBr] lse * log2(e)
  float* sD = sL2 + 2 * kBr;                               // [2][kBr] D
  const uint32_t aK = smem_addr(sK), aV = smem_addr(sV), aQ = smem_addr(sQ), adO = smem_addr(sdO),
                 adS = smem_addr(sdS);
  const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int j = blockIdx.y, j0 = j * kBc, nt_tiles = gridDim.y;
  const size_t C3 = size_t(3) * C;
  const bf16* qb = qkv + size_t(b) * T * C3 + size_t(h) * D;
  const bf16* kb = qb + C;
  const bf16* vb = qb + 2 * C;
  const bf16* dob = dout + size_t(b) * T * C + size_t(h) * D;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
  const int key0 = j0 + warp * 16 + g, key1 = key0 + 8;
  // This CTA's slots (j, j), (j+1, j), ...: slot (i, j) at i(i+1)/2 + j.
  float* const part_bh =
      dq_part + size_t(bh) * (size_t(nt_tiles) * (nt_tiles + 1) / 2) * kBr * D;

  // K, V and query tile j in one cp.async group; that tile's lse2 and D by plain loads.
  cp_async_rows<D>(sK, kb, C3, j0, T);
  cp_async_rows<D>(sV, vb, C3, j0, T);
  cp_async_rows<D>(sQ, qb, C3, j0, T);
  cp_async_rows<D>(sdO, dob, size_t(C), j0, T);
  cp_async_commit();
  load_lse2_D_tile<kThreadsBf16>(sL2, sD, lse, Drow, bh, T, j0);
  float dk[DN][4], dv[DN][4];
  zero_frags(dk);
  zero_frags(dv);

  for (int i = j; i < nt_tiles; i++) {  // causal: query tiles i < j see none of these keys
    const int i0 = i * kBr, buf = (i - j) & 1;
    if (i + 1 < nt_tiles) {
      // Tile i+1 into the other buffers: their last readers (tile i-1) passed the barrier in the
      // middle of iteration i-1.
      cp_async_rows<D>(sQ + (buf ^ 1) * TILE, qb, C3, i0 + kBr, T);
      cp_async_rows<D>(sdO + (buf ^ 1) * TILE, dob, size_t(C), i0 + kBr, T);
      cp_async_commit();
      load_lse2_D_tile<kThreadsBf16>(sL2 + (buf ^ 1) * kBr, sD + (buf ^ 1) * kBr, lse, Drow, bh,
                                     T, i0 + kBr);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // every thread's copies of tile i are visible
    const uint32_t qt = aQ + 2u * uint32_t(buf * TILE), dot = adO + 2u * uint32_t(buf * TILE);
    const float* l2 = sL2 + buf * kBr;
    const float* dd = sD + buf * kBr;
    // S^T = K Q^T: A = K rows ([key][d]); B[k = d][n = query] = Q[query][d], an [n][k] tile.
    float st[NT][4];
    zero_frags(st);
    mma_tile_tile<KC>(st, aK, qt, LD, warp * 16, lane);
    // P^T, masked (key > query, key >= T, query >= T -> 0).
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int qc = c_frag_col(nt, e, tq), query = i0 + qc, key = e < 2 ? key0 : key1;
        st[nt][e] =
            (key > query || query >= T || key >= T) ? 0.0f : p_from_lse2(st[nt][e], sl2, l2[qc]);
      }
    // dV += P^T dO: A = P^T from registers; B[k = query][n = d] = dO[query][d] (.trans).
    mma_frags_tile(dv, st, dot, LD, lane);
    // dP^T = V dO^T: A = V rows; B[k = d][n = query] = dO[query][d], an [n][k] tile.
    float dpt[NT][4];
    zero_frags(dpt);
    mma_tile_tile<KC>(dpt, aV, dot, LD, warp * 16, lane);
    // dS^T = P^T o (dP^T - D[query]) (0 where masked, since P^T is 0 there).
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
      for (int e = 0; e < 4; e++) dpt[nt][e] = st[nt][e] * (dpt[nt][e] - dd[c_frag_col(nt, e, tq)]);
    // dK += dS^T Q: B[k = query][n = d] = Q[query][d] (.trans).
    mma_frags_tile(dk, dpt, qt, LD, lane);
    // dS^T to shared memory for dQ, rounded to bf16 as in the dK product. 32-bit stores: the 8
    // rows g of a warp's store are 36 words apart (LDS = 72 bf16), so the 32 lanes hit the 32
    // banks (4g + tq + 4nt mod 32) once each.
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
      for (int q = 0; q < 2; q++)
        *reinterpret_cast<uint32_t*>(sdS + (warp * 16 + g + 8 * q) * LDS + nt * 8 + 2 * tq) =
            pack_bf16(dpt[nt][2 * q], dpt[nt][2 * q + 1]);
    __syncthreads();  // dS^T of all the tile's keys is there; every read of buffer buf is done
    // dQ_i += dS K_j into slot (i, j): warp w takes queries i0+16w..; A[m = query][k = key] = dS,
    // stored as dS^T = [k][m] (.trans); B[k = key][n = d] = K[key][d] (.trans). In passes of DQN
    // n-tiles, the A fragments reloaded per pass.
    float* slot = part_bh + (size_t(i) * (i + 1) / 2 + j) * kBr * D;
#pragma unroll
    for (int d0 = 0; d0 < DN; d0 += DQN) {
      float dq[DQN][4];
      zero_frags(dq);
#pragma unroll
      for (int kc = 0; kc < kBc / 16; kc++) {
        uint32_t a[4];
        lds_a_t(a, adS, LDS, warp * 16, kc * 16, lane);
#pragma unroll
        for (int dn = 0; dn < DQN; dn += 2) {
          uint32_t kf[4];
          lds_b2_t(kf, aK, LD, (d0 + dn) * 8, kc * 16, lane);
          mma_bf16(dq[dn], a, kf[0], kf[1]);
          mma_bf16(dq[dn + 1], a, kf[2], kf[3]);
        }
      }
#pragma unroll
      for (int dn = 0; dn < DQN; dn++)
#pragma unroll
        for (int q = 0; q < 2; q++)
          *reinterpret_cast<float2*>(slot + (warp * 16 + g + 8 * q) * D + (d0 + dn) * 8 + 2 * tq) =
              make_float2(dq[dn][2 * q], dq[dn][2 * q + 1]);
    }
  }
  const int keys[2] = {key0, key1};
#pragma unroll
  for (int q = 0; q < 2; q++) {
    if (keys[q] >= T) continue;
    bf16* dkrow = dqkv + (size_t(b) * T + keys[q]) * C3 + C + size_t(h) * D;
    bf16* dvrow = dkrow + C;
#pragma unroll
    for (int dn = 0; dn < DN; dn++) {
      *reinterpret_cast<__nv_bfloat162*>(dkrow + dn * 8 + 2 * tq) =
          __floats2bfloat162_rn(dk[dn][2 * q] * scale, dk[dn][2 * q + 1] * scale);
      *reinterpret_cast<__nv_bfloat162*>(dvrow + dn * 8 + 2 * tq) =
          __floats2bfloat162_rn(dv[dn][2 * q], dv[dn][2 * q + 1]);
    }
  }
}

// dQ = scale * (sum over j = 0, 1, ..., i in this order of slot (i, j)) for the query tile i of
// each row (see dq_partial_floats): one thread per 4 columns of a (b, h, t) row, 16-byte loads.
template <int D>
__global__ void __launch_bounds__(256)
    flash_bwd_dq_reduce_kernel(bf16* dqkv, const float* dq_part, int B, int T, int C, int NH,
                               int nt_tiles, float scale) {
  constexpr int V4 = D / 4;
  const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= (long long)B * NH * T * V4) return;
  const int c4 = int(idx % V4);
  const long long row = idx / V4;  // (b*NH + h)*T + t
  const int t = int(row % T);
  const long long bh = row / T;
  const int h = int(bh % NH), b = int(bh / NH);
  const int i = t / kBr, r = t % kBr;
  const size_t slots = size_t(nt_tiles) * (nt_tiles + 1) / 2;
  const float* p =
      dq_part + ((size_t(bh) * slots + size_t(i) * (i + 1) / 2) * kBr + r) * D + 4 * c4;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int jj = 0; jj <= i; jj++) {
    const float4 v = *reinterpret_cast<const float4*>(p + size_t(jj) * kBr * D);
    acc.x += v.x;
    acc.y += v.y;
    acc.z += v.z;
    acc.w += v.w;
  }
  __nv_bfloat162* dst = reinterpret_cast<__nv_bfloat162*>(dqkv + (size_t(b) * T + t) * 3 * C +
                                                          size_t(h) * D + 4 * c4);
  dst[0] = __floats2bfloat162_rn(acc.x * scale, acc.y * scale);
  dst[1] = __floats2bfloat162_rn(acc.z * scale, acc.w * scale);
}

// ================================================================================================
// Launchers
// ================================================================================================

void check_shape(const char* op, int B, int T, int C, int NH) {
  BATON_KCHECK(op, B >= 0);
  BATON_KCHECK(op, T >= 1);
  BATON_KCHECK(op, NH >= 1);
  BATON_KCHECK(op, C >= 1 && C % NH == 0);
  BATON_KCHECK(op, flash_attention_supported(C / NH));
  BATON_KCHECK(op, (long long)B * NH <= 0x7fffffffLL);
  BATON_KCHECK(op, ceil_div(T, kBr) <= 65535);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Opts the kernel into `bytes` of dynamic shared memory (above the 48 KiB default) after checking
// the device allows it.
template <typename Kernel>
void set_smem(const char* op, Kernel kernel, size_t bytes) {
  int dev = 0, optin = 0;
  check_cuda(cudaGetDevice(&dev), op);
  check_cuda(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev), op);
  if (bytes > size_t(optin))
    fail_precondition(op,
                      "shared memory per block of this head size exceeds the device's opt-in "
                      "limit (cudaDevAttrMaxSharedMemoryPerBlockOptin)");
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)),
             op);
}

template <int D>
void fwd_f32(float* out, float* lse, const float* qkv, int B, int T, int C, int NH,
             cudaStream_t s) {
  const char* op = "flash_attention_forward(fp32)";
  constexpr size_t smem = fwd_f32_smem<D>();
  set_smem(op, flash_fwd_f32_kernel<D>, smem);
  const dim3 grid(B * NH, ceil_div(T, kBr));
  flash_fwd_f32_kernel<D>
      <<<grid, kThreadsF32, smem, s>>>(out, lse, qkv, T, C, NH, softmax_scale_log2(D));
  check_launch(op);
}

template <int D>
void fwd_bf16(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH, cudaStream_t s) {
  const char* op = "flash_attention_forward(bf16)";
  constexpr size_t smem = fwd_bf16_smem<D>();
  set_smem(op, flash_fwd_bf16_kernel<D>, smem);
  const dim3 grid(B * NH, ceil_div(T, kBr));
  flash_fwd_bf16_kernel<D>
      <<<grid, kThreadsBf16, smem, s>>>(out, lse, qkv, T, C, NH, softmax_scale_log2(D));
  check_launch(op);
}

template <typename TT>
void rowdot(float* Drow, const TT* dout, const TT* out, int B, int T, int C, int NH, cudaStream_t s,
            const char* op) {
  const long long rows = (long long)B * NH * T;
  flash_bwd_rowdot_kernel<TT>
      <<<unsigned(ceil_div(rows, 4)), 128, 0, s>>>(Drow, dout, out, B, T, C, NH);
  check_launch(op);
}

template <int D>
void bwd_f32(float* dqkv, const float* dout, const float* qkv, const float* lse, const float* Drow,
             int B, int T, int C, int NH, cudaStream_t s) {
  const char* op = "flash_attention_backward(fp32)";
  const dim3 grid(B * NH, ceil_div(T, kBr));
  const float sl2 = softmax_scale_log2(D), scale = softmax_scale(D);
  constexpr size_t smem_kv = bwd_dkdv_f32_smem<D>(), smem_q = bwd_dq_f32_smem<D>();
  set_smem(op, flash_bwd_dkdv_f32_kernel<D>, smem_kv);
  flash_bwd_dkdv_f32_kernel<D>
      <<<grid, kThreadsF32, smem_kv, s>>>(dqkv, dout, qkv, lse, Drow, T, C, NH, sl2, scale);
  check_launch(op);
  set_smem(op, flash_bwd_dq_f32_kernel<D>, smem_q);
  flash_bwd_dq_f32_kernel<D>
      <<<grid, kThreadsF32, smem_q, s>>>(dqkv, dout, qkv, lse, Drow, T, C, NH, sl2, scale);
  check_launch(op);
}

template <int D>
void bwd_bf16(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse, const float* Drow,
              float* dq_part, int B, int T, int C, int NH, cudaStream_t s) {
  const char* op = "flash_attention_backward(bf16)";
  const int nt = ceil_div(T, kBr);
  const dim3 grid(B * NH, nt);
  const float sl2 = softmax_scale_log2(D), scale = softmax_scale(D);
  constexpr size_t smem = bwd_bf16_smem<D>();
  set_smem(op, flash_bwd_bf16_kernel<D>, smem);
  flash_bwd_bf16_kernel<D><<<grid, kThreadsBf16, smem, s>>>(dqkv, dq_part, dout, qkv, lse, Drow, T,
                                                            C, NH, sl2, scale);
  check_launch(op);
  const long long n = (long long)B * NH * T * (D / 4);
  flash_bwd_dq_reduce_kernel<D>
      <<<unsigned(ceil_div(n, 256)), 256, 0, s>>>(dqkv, dq_part, B, T, C, NH, nt, scale);
  check_launch(op);
}

}  // namespace

bool flash_attention_supported(int HS) { return HS == 32 || HS == 64 || HS == 128; }

size_t flash_attention_backward_scratch_floats(int B, int T, int C, int NH) {
  const int HS = NH > 0 ? C / NH : 0;
  return dq_partial_offset(B, T, NH) + dq_partial_floats(B, T, NH, HS);
}

void flash_attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH,
                             cudaStream_t s) {
  const char* op = "flash_attention_forward(fp32)";
  check_shape(op, B, T, C, NH);
  BATON_KCHECK(op, out != nullptr && lse != nullptr && qkv != nullptr);
  if (B == 0) return;
  switch (C / NH) {
    case 32:
      return fwd_f32<32>(out, lse, qkv, B, T, C, NH, s);
    case 64:
      return fwd_f32<64>(out, lse, qkv, B, T, C, NH, s);
    case 128:
      return fwd_f32<128>(out, lse, qkv, B, T, C, NH, s);
  }
}

void flash_attention_forward(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH,
                             cudaStream_t s) {
  const char* op = "flash_attention_forward(bf16)";
  check_shape(op, B, T, C, NH);
  BATON_KCHECK(op, out != nullptr && lse != nullptr && qkv != nullptr);
  BATON_KCHECK(op, aligned16(out) && aligned16(qkv));
  if (B == 0) return;
  switch (C / NH) {
    case 32:
      return fwd_bf16<32>(out, lse, qkv, B, T, C, NH, s);
    case 64:
      return fwd_bf16<64>(out, lse, qkv, B, T, C, NH, s);
    case 128:
      return fwd_bf16<128>(out, lse, qkv, B, T, C, NH, s);
  }
}

void flash_attention_backward(float* dqkv, const float* dout, const float* out, const float* qkv,
                              const float* lse, int B, int T, int C, int NH, float* scratch,
                              size_t scratch_floats, cudaStream_t s) {
  const char* op = "flash_attention_backward(fp32)";
  check_shape(op, B, T, C, NH);
  BATON_KCHECK(
      op, dqkv != nullptr && dout != nullptr && out != nullptr && qkv != nullptr && lse != nullptr);
  BATON_KCHECK(op, scratch != nullptr &&
                       scratch_floats >= flash_attention_backward_scratch_floats(B, T, C, NH));
  if (B == 0) return;
  rowdot(scratch, dout, out, B, T, C, NH, s, op);
  switch (C / NH) {
    case 32:
      return bwd_f32<32>(dqkv, dout, qkv, lse, scratch, B, T, C, NH, s);
    case 64:
      return bwd_f32<64>(dqkv, dout, qkv, lse, scratch, B, T, C, NH, s);
    case 128:
      return bwd_f32<128>(dqkv, dout, qkv, lse, scratch, B, T, C, NH, s);
  }
}

void flash_attention_backward(bf16* dqkv, const bf16* dout, const bf16* out, const bf16* qkv,
                              const float* lse, int B, int T, int C, int NH, float* scratch,
                              size_t scratch_floats, cudaStream_t s) {
  const char* op = "flash_attention_backward(bf16)";
  check_shape(op, B, T, C, NH);
  BATON_KCHECK(
      op, dqkv != nullptr && dout != nullptr && out != nullptr && qkv != nullptr && lse != nullptr);
  BATON_KCHECK(op, aligned16(dqkv) && aligned16(dout) && aligned16(qkv) && aligned16(scratch));
  BATON_KCHECK(op, scratch != nullptr &&
                       scratch_floats >= flash_attention_backward_scratch_floats(B, T, C, NH));
  if (B == 0) return;
  rowdot(scratch, dout, out, B, T, C, NH, s, op);
  float* dq_part = scratch + dq_partial_offset(B, T, NH);
  switch (C / NH) {
    case 32:
      return bwd_bf16<32>(dqkv, dout, qkv, lse, scratch, dq_part, B, T, C, NH, s);
    case 64:
      return bwd_bf16<64>(dqkv, dout, qkv, lse, scratch, dq_part, B, T, C, NH, s);
    case 128:
      return bwd_bf16<128>(dqkv, dout, qkv, lse, scratch, dq_part, B, T, C, NH, s);
  }
}

}  // namespace baton::kernels
