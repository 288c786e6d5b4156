// The CNN ops of the CUDA backend (issue 12, backend.h "convolutional networks"): convolution
// forward / backward-data / backward-filter, batch normalization and pooling through cuDNN's
// legacy API (cudnn_cnn, cudnn_ops; why not the graph API: cudnn_ops.cpp), the bias, ReLU and
// statistics pieces through kernels/cnn.cu. Internal to src/backend/cuda/: CudaBackend owns one,
// created at its first CNN op (a GPT never loads cuDNN).
//
// Invariants (tested by tests/gpu/test_cuda_cnn.cpp):
//  - everything runs on the backend's stream; nothing synchronises the host;
//  - descriptors and algorithm choices are made once per shape (and direction) and cached;
//  - device memory comes from the backend's arena as three buffers (cuDNN's workspace, fp32
//    copies of bf16 tensors, per-channel fp32 vectors) that grow to the largest request, i.e.
//    during the first step, and are then reused: no allocation per step after warm-up;
//  - semantics are backend.h's: dx / y overwritten (cuDNN beta = 0), dw / db / dgamma / dbeta
//    accumulated in fp32 (beta = 1 or a += kernel), batch norm's var the biased batch variance.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <memory>

#include "backend/backend.h"

namespace baton {

// Device memory for the cuDNN ops' buffers: the backend's arena, so its statistics (and the
// "no cudaMalloc after warm-up" check) see them.
struct DeviceMemory {
  std::function<void*(size_t)> alloc;
  std::function<void(void*)> release;
};

class CudnnOps {
 public:
  // Creates the cuDNN handle on `stream`; throws Error when cuDNN cannot start (missing libraries,
  // a version other than the build's).
  CudnnOps(cudaStream_t stream, DType act, DeviceMemory memory);
  ~CudnnOps();
  CudnnOps(const CudnnOps&) = delete;
  CudnnOps& operator=(const CudnnOps&) = delete;

  // The Backend ops of the same names (backend.h has their contracts).
  void conv2d_forward(void* y, const void* x, const void* w, const void* bias, const Conv2d& c);
  void conv2d_backward(void* dx, float* dw, float* db, const void* dy, const void* x, const void* w,
                       const Conv2d& c);
  void batchnorm_forward(void* y, float* mean, float* var, const void* x, const void* gamma,
                         const void* beta, int N, int C, int HW, float eps, bool training);
  void batchnorm_backward(void* dx, float* dgamma, float* dbeta, const void* dy, const void* x,
                          const float* mean, const float* var, const void* gamma, int N, int C,
                          int HW, float eps);
  void pool2d_forward(void* y, void* workspace, const void* x, const Pool2d& p);
  void pool2d_backward(void* dx, const void* dy, const void* workspace, const Pool2d& p);

  // bf16 weight gradients run in fp32 on widened copies of x and dy, a batch chunk at a time so
  // that the copies take at most this many bytes (at least one sample). Default 256 MiB; tests
  // lower it to exercise the chunking.
  void set_widen_budget(size_t bytes);
  // Bytes held in the three buffers (for the memory summary).
  size_t buffer_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Backend::pool2d_workspace_bytes of the CUDA backend: max pooling keeps copies of its input and
// output (cuDNN's max-pool backward finds the argmax again from x and y; backend.h's backward
// gets neither), average pooling nothing.
size_t cudnn_pool2d_workspace_bytes(const Pool2d& p, DType act);

}  // namespace baton
