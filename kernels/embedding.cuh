// Token + position embeddings, vocab-parallel aware: this rank holds rows
// [vocab_start, vocab_start + vocab_rows) of the token table in wte[vocab_rows, C].
//
// bf16 overloads: wte/wpe (compute copies) and out/dout are bf16; dwte/dwpe stay fp32. The
// forward adds in fp32 and rounds once; the backward is the fp32 one reading bf16 dout (same
// bucketing, same order, same scratch: embedding_backward_scratch_ints).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace baton::kernels {

// out[B,T,C] = (token in range ? wte[token - vocab_start] : 0) + (wpe ? wpe[t] : 0).
// Negative tokens count as out of range (the CPU twin rejects them; callers never pass them).
void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       int B, int T, int C, int vocab_start, int vocab_rows, cudaStream_t s);

// Ints of device scratch embedding_backward needs for N = B*T tokens.
size_t embedding_backward_scratch_ints(int N);
// dwte[vocab_rows,C] += scatter of dout by in-range token; dwpe[T,C] += sum over b (skipped when
// null). Deterministic without atomics: the in-range positions are bucketed by token on the host
// (tokens_host: the same B*T tokens in host memory), uploaded to `scratch`, and one block column
// owns each distinct token row and adds its positions in ascending order (the CPU twin's order).
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens_host,
                        int B, int T, int C, int vocab_start, int vocab_rows, int32_t* scratch,
                        size_t scratch_ints, cudaStream_t s);

using bf16 = __nv_bfloat16;
// out = bf16(float(wte row or 0) + float(wpe row)); 16-byte accesses when C % 8 == 0 and out,
// wte, wpe are 16-byte aligned.
void embedding_forward(bf16* out, const int32_t* tokens, const bf16* wte, const bf16* wpe, int B,
                       int T, int C, int vocab_start, int vocab_rows, cudaStream_t s);
void embedding_backward(float* dwte, float* dwpe, const bf16* dout, const int32_t* tokens_host,
                        int B, int T, int C, int vocab_start, int vocab_rows, int32_t* scratch,
                        size_t scratch_ints, cudaStream_t s);

}  // namespace baton::kernels
