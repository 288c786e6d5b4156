// CudnnSdpa: the causal self-attention core (backend.h "causal self-attention core") through
// cuDNN's fused flash attention -- the "Fused Flash Attention fprop / bprop" runtime-fusion
// patterns of the cuDNN graph API, built with the C backend API (cudnn_graph.h; the cudnn_frontend
// C++ library is not used). The CUDA backend calls it when precision.attention = "cudnn"
// (backend/attention_kernel.h); cudnn_sdpa.cpp has the graphs and the reasons for them.
//
// Invariants (tests/emu/test_cudnn_sdpa_emulated.cpp on the host emulator, tests/gpu/
// test_cudnn_sdpa.cpp on a device):
//  - bf16 only: qkv, out, dout, dqkv are bf16; the state is fp32 lse[B,NH,T] = the natural-log
//    logsumexp of the row's scaled, masked scores (q.k / sqrt(HS)) -- the flash kernel's state
//    exactly, so the two kernels' states are interchangeable;
//  - Q, K, V, dQ, dK, dV are strided views of qkv / dqkv [B,T,3C] (no copies); out [B,T,C];
//  - a graph and its execution plan are built once per (direction, B, T, NH, HS) and cached; the
//    engine is the first of cuDNN's heuristic list (mode A, then FALLBACK) whose numerical notes
//    do not include NONDETERMINISTIC and whose plan finalizes (baton promises same inputs, same
//    bits);
//  - the workspace comes from the caller's scratch; everything runs on the backend's stream;
//  - every cuDNN failure is an Error naming the step, the shape, cuDNN's status and its last error
//    message.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

namespace baton {

class CudnnSdpa {
 public:
  // `workspace(bytes)` returns device memory of at least `bytes`, valid until the next call (the
  // backend's op scratch). Creates the cuDNN handle on `stream`; throws Error when cuDNN cannot start.
  CudnnSdpa(cudaStream_t stream, std::function<void*(size_t)> workspace);
  ~CudnnSdpa();
  CudnnSdpa(const CudnnSdpa&) = delete;
  CudnnSdpa& operator=(const CudnnSdpa&) = delete;

  // Head sizes cuDNN documents for the bf16 fused flash attention on Ampere and Hopper, forward
  // and backward: a multiple of 8, at most 128.
  static bool supported_head_size(int HS);

  // bf16 tensors as raw device pointers (__nv_bfloat16). out[B,T,C], lse[B,NH,T] fp32.
  void forward(void* out, float* lse, const void* qkv, int B, int T, int C, int NH);
  // dqkv[B,T,3C] overwritten; out and lse are the forward's.
  void backward(void* dqkv, const void* dout, const void* out, const void* qkv, const float* lse, int B,
                int T, int C, int NH);

  // One line for the run log: the graphs built and the engines they run on.
  std::string summary() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace baton
