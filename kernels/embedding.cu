// Embedding kernels (see embedding.cuh). Backward bucketing, as llm.c's encoder_backward: the
// host groups positions by token (a stable sort of (row, position) pairs), so each dwte row has a
// single owner and is summed in position order — no float atomics, bit-reproducible.
#include <algorithm>
#include <utility>
#include <vector>

#include "kernels/cast.cuh"
#include "kernels/common.cuh"
#include "kernels/embedding.cuh"

namespace baton::kernels {
namespace {

__global__ void embedding_forward_kernel(float* out, const int32_t* tokens, const float* wte,
                                         const float* wpe, int N, int T, int C, int vocab_start,
                                         int vocab_rows) {
  const size_t total = size_t(N) * C;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x) {
    const int n = int(i / C), c = int(i % C);
    const int row = tokens[n] - vocab_start;
    float v = (tokens[n] >= 0 && row >= 0 && row < vocab_rows) ? wte[size_t(row) * C + c] : 0.0f;
    if (wpe != nullptr) v += wpe[size_t(n % T) * C + c];
    out[i] = v;
  }
}

// out[n, 8 columns] per thread per iteration (bf16): the fp32 kernel's sum, rounded once.
template <bool kVec>
__global__ void embedding_forward_bf16_kernel(bf16* out, const int32_t* tokens, const bf16* wte,
                                              const bf16* wpe, int N, int T, int C,
                                              int vocab_start, int vocab_rows) {
  const int groups = (C + 7) / 8;
  const size_t total = size_t(N) * groups;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x) {
    const int n = int(i / groups), c = int(i % groups) * 8;
    const int valid = kVec ? 8 : (C - c < 8 ? C - c : 8);
    const int row = tokens[n] - vocab_start;
    float v[8];
    if (tokens[n] >= 0 && row >= 0 && row < vocab_rows) {
      unpack8(v, load_group<kVec>(wte + size_t(row) * C + c, valid));
    } else {
#pragma unroll
      for (int j = 0; j < 8; j++) v[j] = 0.0f;
    }
    if (wpe != nullptr) {
      float p[8];
      unpack8(p, load_group<kVec>(wpe + size_t(n % T) * C + c, valid));
#pragma unroll
      for (int j = 0; j < 8; j++) v[j] += p[j];
    }
    store_group<kVec>(out + size_t(n) * C + c, pack8(v), valid);
  }
}

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(bf16 x) { return __bfloat162float(x); }

// blockIdx.x: distinct row u; blockIdx.y: a tile of 256 channels; layout of `buckets`: offsets[U+1] | rows[U] | pos[M].
// Dout: float or bf16 (converted exactly to float; the sums are fp32 in the same order).
template <typename Dout>
__global__ void embedding_dwte_kernel(float* dwte, const Dout* dout, const int32_t* buckets, int U,
                                      int C) {
  const int u = blockIdx.x;
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int32_t* offsets = buckets;
  const int32_t* rows = buckets + U + 1;
  const int32_t* pos = rows + U;
  float* dw = dwte + size_t(rows[u]) * C + c;
  float acc = *dw;
  for (int k = offsets[u]; k < offsets[u + 1]; k++) acc += to_f32(dout[size_t(pos[k]) * C + c]);
  *dw = acc;
}

template <typename Dout>
__global__ void embedding_dwpe_kernel(float* dwpe, const Dout* dout, int B, int T, int C) {
  const size_t total = size_t(T) * C;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x) {
    float acc = dwpe[i];
    for (int b = 0; b < B; b++) acc += to_f32(dout[size_t(b) * total + i]);
    dwpe[i] = acc;
  }
}

int blocks_for(size_t n) { return int(std::min<size_t>((n + 255) / 256, 65535u * 8)); }

}  // namespace

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       int B, int T, int C, int vocab_start, int vocab_rows, cudaStream_t s) {
  BATON_KCHECK("embedding_forward", B >= 0 && T >= 0 && C > 0 && vocab_rows >= 0);
  const size_t total = size_t(B) * T * C;
  if (total == 0) return;
  BATON_KCHECK("embedding_forward", out && tokens && (wte || vocab_rows == 0));
  embedding_forward_kernel<<<blocks_for(total), 256, 0, s>>>(out, tokens, wte, wpe, B * T, T, C,
                                                              vocab_start, vocab_rows);
  check_launch("embedding_forward");
}

size_t embedding_backward_scratch_ints(int N) { return 3 * size_t(std::max(N, 0)) + 1; }

namespace {
template <typename Dout>
void embedding_backward_impl(float* dwte, float* dwpe, const Dout* dout, const int32_t* tokens_host,
                             int B, int T, int C, int vocab_start, int vocab_rows, int32_t* scratch,
                             size_t scratch_ints, cudaStream_t s) {
  BATON_KCHECK("embedding_backward", B >= 0 && T >= 0 && C > 0 && vocab_rows >= 0);
  const int N = B * T;
  if (N == 0) return;
  BATON_KCHECK("embedding_backward", dout && tokens_host);
  if (dwte != nullptr) {
    BATON_KCHECK("embedding_backward", scratch != nullptr);
    BATON_KCHECK("embedding_backward", scratch_ints >= embedding_backward_scratch_ints(N));
    std::vector<std::pair<int32_t, int32_t>> rp;  // (row, position), sorted: positions ascend
    rp.reserve(N);
    for (int n = 0; n < N; n++) {
      const int32_t row = tokens_host[n] - vocab_start;
      if (tokens_host[n] >= 0 && row >= 0 && row < vocab_rows) rp.emplace_back(row, n);
    }
    std::sort(rp.begin(), rp.end());
    std::vector<int32_t> offsets{0}, rows, pos;
    for (size_t k = 0; k < rp.size(); k++) {
      if (k == 0 || rp[k].first != rp[k - 1].first) {
        if (k > 0) offsets.push_back(int32_t(k));
        rows.push_back(rp[k].first);
      }
      pos.push_back(rp[k].second);
    }
    const int U = int(rows.size());
    if (U > 0) {
      offsets.push_back(int32_t(rp.size()));
      std::vector<int32_t> packed;
      packed.reserve(offsets.size() + rows.size() + pos.size());
      packed.insert(packed.end(), offsets.begin(), offsets.end());
      packed.insert(packed.end(), rows.begin(), rows.end());
      packed.insert(packed.end(), pos.begin(), pos.end());
      // From pageable memory: returns once `packed` has been staged, so it may be freed after.
      check_cuda(cudaMemcpyAsync(scratch, packed.data(), packed.size() * sizeof(int32_t),
                                 cudaMemcpyHostToDevice, s),
                 "embedding_backward");
      BATON_KCHECK("embedding_backward", ceil_div(C, 256) <= 65535);
      embedding_dwte_kernel<Dout><<<dim3(U, ceil_div(C, 256)), 256, 0, s>>>(dwte, dout, scratch, U, C);
      check_launch("embedding_backward");
    }
  }
  if (dwpe != nullptr) {
    embedding_dwpe_kernel<Dout><<<blocks_for(size_t(T) * C), 256, 0, s>>>(dwpe, dout, B, T, C);
    check_launch("embedding_backward");
  }
}
}  // namespace

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens_host,
                        int B, int T, int C, int vocab_start, int vocab_rows, int32_t* scratch,
                        size_t scratch_ints, cudaStream_t s) {
  embedding_backward_impl(dwte, dwpe, dout, tokens_host, B, T, C, vocab_start, vocab_rows, scratch,
                          scratch_ints, s);
}

// ---- bf16 ----------------------------------------------------------------------------------

void embedding_forward(bf16* out, const int32_t* tokens, const bf16* wte, const bf16* wpe, int B,
                       int T, int C, int vocab_start, int vocab_rows, cudaStream_t s) {
  BATON_KCHECK("embedding_forward", B >= 0 && T >= 0 && C > 0 && vocab_rows >= 0);
  const size_t total = size_t(B) * T * C;
  if (total == 0) return;
  BATON_KCHECK("embedding_forward", out && tokens && (wte || vocab_rows == 0));
  const int blocks = blocks_for(size_t(B) * T * size_t((C + 7) / 8));
  if (C % 8 == 0 && aligned16(out) && aligned16(wte) && aligned16(wpe))
    embedding_forward_bf16_kernel<true><<<blocks, 256, 0, s>>>(out, tokens, wte, wpe, B * T, T, C,
                                                               vocab_start, vocab_rows);
  else
    embedding_forward_bf16_kernel<false><<<blocks, 256, 0, s>>>(out, tokens, wte, wpe, B * T, T, C,
                                                                vocab_start, vocab_rows);
  check_launch("embedding_forward");
}

void embedding_backward(float* dwte, float* dwpe, const bf16* dout, const int32_t* tokens_host,
                        int B, int T, int C, int vocab_start, int vocab_rows, int32_t* scratch,
                        size_t scratch_ints, cudaStream_t s) {
  embedding_backward_impl(dwte, dwpe, dout, tokens_host, B, T, C, vocab_start, vocab_rows, scratch,
                          scratch_ints, s);
}

}  // namespace baton::kernels
