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
// So every fragment is a 32-bit load of two bf16 adjacent along k: A from a row-major [m][k] tile,
// B from an [n][k] tile (K for S = Q K^T; a transposed copy for P V and friends). The C fragments
// of n-tiles 2kc and 2kc+1 are exactly the A fragment of k-chunk kc (c[0..1] -> a[0], c[2..3] ->
// a[1] of n-tile 2kc; a[2], a[3] from n-tile 2kc+1), which feeds P (and dS) into the next product
// without shared memory (FA2 §3.3: Q is split across warps, so P V needs no exchange).
// Shared tiles have a 16-byte row padding (LD = D + 8) so that 16-byte stores stay aligned.
// ================================================================================================

constexpr int kThreadsBf16 = 128;

__device__ __forceinline__ uint32_t ld32(const bf16* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}
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
// A fragment of rows m0..m0+15, columns k0..k0+15 of a row-major shared tile with row stride ld.
__device__ __forceinline__ void load_a_frag(uint32_t (&a)[4], const bf16* s, int ld, int m0, int k0,
                                            int g, int tq) {
  const bf16* p = s + (m0 + g) * ld + k0 + 2 * tq;
  a[0] = ld32(p);
  a[1] = ld32(p + 8 * ld);
  a[2] = ld32(p + 8);
  a[3] = ld32(p + 8 * ld + 8);
}
// B fragment (k0..k0+15) x (n0..n0+7) from a shared tile stored [n][k] (row n, stride ld).
__device__ __forceinline__ void load_b_frag(uint32_t& b0, uint32_t& b1, const bf16* s, int ld,
                                            int n0, int k0, int g, int tq) {
  const bf16* p = s + (n0 + g) * ld + k0 + 2 * tq;
  b0 = ld32(p);
  b1 = ld32(p + 8);
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
// acc[nt] += A B over k < 16 KC for the warp's rows m0..m0+15 and n-tiles nt < NT: A from a
// row-major [m][k] shared tile, B from an [n][k] shared tile, both with row stride ld. k-chunk by
// k-chunk (A fragment loaded once per chunk), n-tiles in order.
template <int KC, int NT>
__device__ __forceinline__ void mma_tile_tile(float (&acc)[NT][4], const bf16* sA, const bf16* sB,
                                              int ld, int m0, int g, int tq) {
#pragma unroll
  for (int kc = 0; kc < KC; kc++) {
    uint32_t a[4];
    load_a_frag(a, sA, ld, m0, kc * 16, g, tq);
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
      uint32_t b0, b1;
      load_b_frag(b0, b1, sB, ld, nt * 8, kc * 16, g, tq);
      mma_bf16(acc[nt], a, b0, b1);
    }
  }
}
// acc[dn] += P B with P the fp32 C fragments p[0..NP) of the previous product (P, P^T or dS:
// k = its columns), rounded to bf16 A fragments two n-tiles at a time; B from an [n][k] shared
// tile with row stride ldt (a transposed tile: V^T, dO^T, Q^T or K^T).
template <int NP, int DN>
__device__ __forceinline__ void mma_frags_tile(float (&acc)[DN][4], const float (&p)[NP][4],
                                               const bf16* sBt, int ldt, int g, int tq) {
  static_assert(NP % 2 == 0, "two C fragments per A fragment");
#pragma unroll
  for (int kc = 0; kc < NP / 2; kc++) {
    uint32_t pa[4];
    c_to_a_frag(pa, p[2 * kc], p[2 * kc + 1]);
#pragma unroll
    for (int dn = 0; dn < DN; dn++) {
      uint32_t b0, b1;
      load_b_frag(b0, b1, sBt, ldt, dn * 8, kc * 16, g, tq);
      mma_bf16(acc[dn], pa, b0, b1);
    }
  }
}

// kBr rows of D bf16 from rows t0.. of a [T, stride] matrix into a row-major shared tile (row
// stride D + 8), 16 bytes per access; rows >= T are zero.
template <int D>
__device__ __forceinline__ void load_rows_bf16(bf16* s, const bf16* base, size_t stride, int t0,
                                               int T) {
  constexpr int LD = D + 8, VPR = D / 8;
  for (int idx = threadIdx.x; idx < kBr * VPR; idx += kThreadsBf16) {
    const int r = idx / VPR, cv = idx % VPR, t = t0 + r;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (t < T) v = *reinterpret_cast<const uint4*>(base + size_t(t) * stride + cv * 8);
    *reinterpret_cast<uint4*>(s + r * LD + cv * 8) = v;
  }
}
// The same rows stored transposed: st[d][r] (row stride kBr + 8), for B fragments whose k index is
// the token (P V, P^T dO, dS^T Q, dS K).
template <int D>
__device__ __forceinline__ void load_rows_bf16_transposed(bf16* st, const bf16* base, size_t stride,
                                                          int t0, int T) {
  constexpr int LDT = kBr + 8, VPR = D / 8;
  for (int idx = threadIdx.x; idx < kBr * VPR; idx += kThreadsBf16) {
    const int r = idx / VPR, cv = idx % VPR, t = t0 + r;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (t < T) v = *reinterpret_cast<const uint4*>(base + size_t(t) * stride + cv * 8);
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};  // element k is half k % 2 of word k / 2
#pragma unroll
    for (int k = 0; k < 8; k++)
      st[(cv * 8 + k) * LDT + r] =
          __ushort_as_bfloat16((unsigned short)(w[k >> 1] >> (16 * (k & 1))));
  }
}

template <int D>
constexpr size_t tile_bytes() {
  return sizeof(bf16) * size_t(kBr) * (D + 8);
}
template <int D>
constexpr size_t tile_t_bytes() {
  return sizeof(bf16) * size_t(D) * (kBr + 8);
}
template <int D>
constexpr size_t fwd_bf16_smem() {
  return 2 * tile_bytes<D>() + tile_t_bytes<D>();
}

// Forward, FA2 Algorithm 1 (§3.1.1, causal masking there): CTA (bh, query tile i); warp w: queries
// i0+16w.., i.e. this thread's rows row0 = i0+16w+g and row1 = row0+8. S, P and O live in
// registers as C fragments; Q's A fragments are loaded once.
template <int D>
__global__ void __launch_bounds__(kThreadsBf16)
    flash_fwd_bf16_kernel(bf16* out, float* lse, const bf16* qkv, int T, int C, int NH, float sl2) {
  constexpr int LD = D + 8, LDT = kBc + 8, KC = D / 16, NT = kBc / 8, DN = D / 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* sQ = reinterpret_cast<bf16*>(smem_raw);  // [kBr][LD]
  bf16* sK = sQ + kBr * LD;                      // [kBc][LD]
  bf16* sVt = sK + kBc * LD;                     // [D][LDT]: V transposed
  const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int i = gridDim.y - 1 - blockIdx.y;
  const int i0 = i * kBr;
  const size_t C3 = size_t(3) * C;
  const bf16* qb = qkv + size_t(b) * T * C3 + size_t(h) * D;
  const bf16* kb = qb + C;
  const bf16* vb = qb + 2 * C;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
  const int row0 = i0 + warp * 16 + g, row1 = row0 + 8;

  load_rows_bf16<D>(sQ, qb, C3, i0, T);
  __syncthreads();
  uint32_t qa[KC][4];
#pragma unroll
  for (int kc = 0; kc < KC; kc++) load_a_frag(qa[kc], sQ, LD, warp * 16, kc * 16, g, tq);

  float o[DN][4];
  zero_frags(o);
  // Running max (log2 domain) of rows row0, row1 (the same in the 4 lanes of a quad) and this
  // lane's partial row sums (its 16 columns per tile; the quad is summed once at the end).
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  for (int j = 0; j <= i; j++) {  // causal: key tiles j > i are skipped
    const int j0 = j * kBc;
    __syncthreads();  // the previous tile's sK/sVt reads are done
    load_rows_bf16<D>(sK, kb, C3, j0, T);
    load_rows_bf16_transposed<D>(sVt, vb, C3, j0, T);
    __syncthreads();
    // S = Q K^T: B[k = d][n = key] = K[key][d], K stored [key][d] = [n][k].
    float s[NT][4];
    zero_frags(s);
#pragma unroll
    for (int kc = 0; kc < KC; kc++)
#pragma unroll
      for (int nt = 0; nt < NT; nt++) {
        uint32_t b0, b1;
        load_b_frag(b0, b1, sK, LD, nt * 8, kc * 16, g, tq);
        mma_bf16(s[nt], qa[kc], b0, b1);
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
    // O += P V: P from registers (bf16), B[k = key][n = d] = Vt[d][key] = [n][k].
    mma_frags_tile(o, s, sVt, LDT, g, tq);
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

template <int D>
constexpr size_t bwd_dkdv_bf16_smem() {
  return 4 * tile_bytes<D>() + 2 * tile_t_bytes<D>() + sizeof(float) * 2 * kBr;
}

// Backward dK/dV, FA2 Algorithm 2 (§3.1.2; §3.2): CTA (bh, key tile j) owns dK_j, dV_j; warp w owns
// keys j0+16w.. (C-fragment rows: key0 = j0+16w+g, key1 = key0+8) and visits query tiles i >= j.
// Works on the transposed products so that the owned rows are the MMA's m dimension:
//   S^T = K Q^T, P^T = exp2(S^T sl2 - lse2[query]), dV += P^T dO, dP^T = V dO^T,
//   dS^T = P^T o (dP^T - D[query]), dK += dS^T Q (scaled by 1/sqrt(HS) at the end).
template <int D>
__global__ void __launch_bounds__(kThreadsBf16)
    flash_bwd_dkdv_bf16_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse,
                               const float* Drow, int T, int C, int NH, float sl2, float scale) {
  constexpr int LD = D + 8, LDT = kBr + 8, KC = D / 16, NT = kBr / 8, DN = D / 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* sK = reinterpret_cast<bf16*>(smem_raw);           // [kBc][LD]
  bf16* sV = sK + kBc * LD;                               // [kBc][LD]
  bf16* sQ = sV + kBc * LD;                               // [kBr][LD]
  bf16* sdO = sQ + kBr * LD;                              // [kBr][LD]
  bf16* sQt = sdO + kBr * LD;                             // [D][LDT]
  bf16* sdOt = sQt + D * LDT;                             // [D][LDT]
  float* sL2 = reinterpret_cast<float*>(sdOt + D * LDT);  // [kBr]
  float* sD = sL2 + kBr;                                  // [kBr]
  const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int j = blockIdx.y, j0 = j * kBc, nt_tiles = gridDim.y;
  const size_t C3 = size_t(3) * C;
  const bf16* qb = qkv + size_t(b) * T * C3 + size_t(h) * D;
  const bf16* kb = qb + C;
  const bf16* vb = qb + 2 * C;
  const bf16* dob = dout + size_t(b) * T * C + size_t(h) * D;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
  const int key0 = j0 + warp * 16 + g, key1 = key0 + 8;

  load_rows_bf16<D>(sK, kb, C3, j0, T);
  load_rows_bf16<D>(sV, vb, C3, j0, T);
  float dk[DN][4], dv[DN][4];
  zero_frags(dk);
  zero_frags(dv);

  for (int i = j; i < nt_tiles; i++) {
    const int i0 = i * kBr;
    __syncthreads();
    load_rows_bf16<D>(sQ, qb, C3, i0, T);
    load_rows_bf16_transposed<D>(sQt, qb, C3, i0, T);
    load_rows_bf16<D>(sdO, dob, size_t(C), i0, T);
    load_rows_bf16_transposed<D>(sdOt, dob, size_t(C), i0, T);
    load_lse2_D_tile<kThreadsBf16>(sL2, sD, lse, Drow, bh, T, i0);
    __syncthreads();
    // S^T = K Q^T: A = K rows (row-major [key][d]); B[k = d][n = query] = Q[query][d] = [n][k].
    float st[NT][4];
    zero_frags(st);
    mma_tile_tile<KC>(st, sK, sQ, LD, warp * 16, g, tq);
    // P^T, masked (key > query, key >= T, query >= T -> 0).
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int qc = c_frag_col(nt, e, tq), query = i0 + qc, key = e < 2 ? key0 : key1;
        st[nt][e] =
            (key > query || query >= T || key >= T) ? 0.0f : p_from_lse2(st[nt][e], sl2, sL2[qc]);
      }
    // dV += P^T dO: A = P^T from registers; B[k = query][n = d] = dOt[d][query] = [n][k].
    mma_frags_tile(dv, st, sdOt, LDT, g, tq);
    // dP^T = V dO^T: A = V rows; B[k = d][n = query] = dO[query][d] = [n][k].
    float dpt[NT][4];
    zero_frags(dpt);
    mma_tile_tile<KC>(dpt, sV, sdO, LD, warp * 16, g, tq);
    // dS^T = P^T o (dP^T - D[query]) (0 where masked, since P^T is 0 there).
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
      for (int e = 0; e < 4; e++) dpt[nt][e] = st[nt][e] * (dpt[nt][e] - sD[c_frag_col(nt, e, tq)]);
    // dK += dS^T Q: B[k = query][n = d] = Qt[d][query] = [n][k].
    mma_frags_tile(dk, dpt, sQt, LDT, g, tq);
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

template <int D>
constexpr size_t bwd_dq_bf16_smem() {
  return 4 * tile_bytes<D>() + tile_t_bytes<D>();
}

// Backward dQ (FA2 §3.1.2, dQ owned per query tile instead of §3.2's atomics): CTA (bh, query tile
// i), warp w owns queries i0+16w.. (rows row0, row1) and visits key tiles j <= i:
//   S = Q K^T, P = exp2(S sl2 - lse2[row]), dP = dO V^T, dS = P o (dP - D[row]), dQ += dS K.
template <int D>
__global__ void __launch_bounds__(kThreadsBf16)
    flash_bwd_dq_bf16_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse,
                             const float* Drow, int T, int C, int NH, float sl2, float scale) {
  constexpr int LD = D + 8, LDT = kBc + 8, KC = D / 16, NT = kBc / 8, DN = D / 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* sQ = reinterpret_cast<bf16*>(smem_raw);  // [kBr][LD]
  bf16* sdO = sQ + kBr * LD;                     // [kBr][LD]
  bf16* sK = sdO + kBr * LD;                     // [kBc][LD]
  bf16* sV = sK + kBc * LD;                      // [kBc][LD]
  bf16* sKt = sV + kBc * LD;                     // [D][LDT]
  const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int i = gridDim.y - 1 - blockIdx.y;
  const int i0 = i * kBr;
  const size_t C3 = size_t(3) * C;
  const bf16* qb = qkv + size_t(b) * T * C3 + size_t(h) * D;
  const bf16* kb = qb + C;
  const bf16* vb = qb + 2 * C;
  const bf16* dob = dout + size_t(b) * T * C + size_t(h) * D;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
  const int row0 = i0 + warp * 16 + g, row1 = row0 + 8;
  const int rows[2] = {row0, row1};
  float l2[2], Dr[2];
#pragma unroll
  for (int q = 0; q < 2; q++) {
    l2[q] = lse2_or_0(lse, bh, T, rows[q]);
    Dr[q] = D_or_0(Drow, bh, T, rows[q]);
  }

  load_rows_bf16<D>(sQ, qb, C3, i0, T);
  load_rows_bf16<D>(sdO, dob, size_t(C), i0, T);
  float dq[DN][4];
  zero_frags(dq);

  for (int j = 0; j <= i; j++) {
    const int j0 = j * kBc;
    __syncthreads();
    load_rows_bf16<D>(sK, kb, C3, j0, T);
    load_rows_bf16<D>(sV, vb, C3, j0, T);
    load_rows_bf16_transposed<D>(sKt, kb, C3, j0, T);
    __syncthreads();
    // S = Q K^T and dP = dO V^T (B[k = d][n = key] from the [key][d] tiles).
    // (One k loop for both products: two mma_tile_tile calls take up to 10 more registers.)
    float s[NT][4], dp[NT][4];
    zero_frags(s);
    zero_frags(dp);
#pragma unroll
    for (int kc = 0; kc < KC; kc++) {
      uint32_t qa[4], da[4];
      load_a_frag(qa, sQ, LD, warp * 16, kc * 16, g, tq);
      load_a_frag(da, sdO, LD, warp * 16, kc * 16, g, tq);
#pragma unroll
      for (int nt = 0; nt < NT; nt++) {
        uint32_t b0, b1;
        load_b_frag(b0, b1, sK, LD, nt * 8, kc * 16, g, tq);
        mma_bf16(s[nt], qa, b0, b1);
        load_b_frag(b0, b1, sV, LD, nt * 8, kc * 16, g, tq);
        mma_bf16(dp[nt], da, b0, b1);
      }
    }
    // dS = P o (dP - D), masked (key > row, key >= T, row >= T -> 0); kept in s.
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int key = j0 + c_frag_col(nt, e, tq), q = e >> 1;
        const bool masked = key > rows[q] || key >= T || rows[q] >= T;
        const float p = masked ? 0.0f : p_from_lse2(s[nt][e], sl2, l2[q]);
        s[nt][e] = p * (dp[nt][e] - Dr[q]);
      }
    // dQ += dS K: B[k = key][n = d] = Kt[d][key] = [n][k].
    mma_frags_tile(dq, s, sKt, LDT, g, tq);
  }
#pragma unroll
  for (int q = 0; q < 2; q++) {
    if (rows[q] >= T) continue;
    bf16* dqrow = dqkv + (size_t(b) * T + rows[q]) * C3 + size_t(h) * D;
#pragma unroll
    for (int dn = 0; dn < DN; dn++)
      *reinterpret_cast<__nv_bfloat162*>(dqrow + dn * 8 + 2 * tq) =
          __floats2bfloat162_rn(dq[dn][2 * q] * scale, dq[dn][2 * q + 1] * scale);
  }
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
              int B, int T, int C, int NH, cudaStream_t s) {
  const char* op = "flash_attention_backward(bf16)";
  const dim3 grid(B * NH, ceil_div(T, kBr));
  const float sl2 = softmax_scale_log2(D), scale = softmax_scale(D);
  constexpr size_t smem_kv = bwd_dkdv_bf16_smem<D>(), smem_q = bwd_dq_bf16_smem<D>();
  set_smem(op, flash_bwd_dkdv_bf16_kernel<D>, smem_kv);
  flash_bwd_dkdv_bf16_kernel<D>
      <<<grid, kThreadsBf16, smem_kv, s>>>(dqkv, dout, qkv, lse, Drow, T, C, NH, sl2, scale);
  check_launch(op);
  set_smem(op, flash_bwd_dq_bf16_kernel<D>, smem_q);
  flash_bwd_dq_bf16_kernel<D>
      <<<grid, kThreadsBf16, smem_q, s>>>(dqkv, dout, qkv, lse, Drow, T, C, NH, sl2, scale);
  check_launch(op);
}

}  // namespace

bool flash_attention_supported(int HS) { return HS == 32 || HS == 64 || HS == 128; }

size_t flash_attention_backward_scratch_floats(int B, int T, int NH) {
  return size_t(B) * size_t(NH) * size_t(T);
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
                       scratch_floats >= flash_attention_backward_scratch_floats(B, T, NH));
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
  BATON_KCHECK(op, aligned16(dqkv) && aligned16(dout) && aligned16(qkv));
  BATON_KCHECK(op, scratch != nullptr &&
                       scratch_floats >= flash_attention_backward_scratch_floats(B, T, NH));
  if (B == 0) return;
  rowdot(scratch, dout, out, B, T, C, NH, s, op);
  switch (C / NH) {
    case 32:
      return bwd_bf16<32>(dqkv, dout, qkv, lse, scratch, B, T, C, NH, s);
    case 64:
      return bwd_bf16<64>(dqkv, dout, qkv, lse, scratch, B, T, C, NH, s);
    case 128:
      return bwd_bf16<128>(dqkv, dout, qkv, lse, scratch, B, T, C, NH, s);
  }
}

}  // namespace baton::kernels
