// The CPU's CNN ops (backend.h "convolutional networks") through oneDNN (Debian's libdnnl, OpenMP
// runtime, so it shares baton's threads): convolution forward / backward-data / backward-weights and
// pooling as oneDNN primitives; batch normalization our own (cpu_batchnorm.h: its sums in double,
// where oneDNN 2.6 sums in fp32 one value at a time); ReLU and axpby as plain OpenMP loops
// (memory-bound, nothing to gain from a primitive). fp32 tensors (convolutions also bf16, for
// native bf16); activations NHWC (the CPU backend's image layout: oneDNN's direct convolution and
// pooling kernels read it without reorders), weights OIHW (reordered, per call, into the convolution kernel's blocked layout).
// 3×3 stride-1 fp32 convolutions of 32+ channels run as Winograd F(4×4, 3×3) on AVX-512 CPUs
// (faster there, cpu_cnn.cpp ConvChoice), their activations reordered to and from oneDNN's
// blocked layout around the call; the environment variable BATON_CPU_CONV = "auto" (default) |
// "winograd" (every 3×3 stride-1 convolution oneDNN's kernel takes) | "direct" decides, read when
// the backend is made (another value is an error there).
//
// Every primitive is built once per shape and cached with its memory objects (rebound to the
// caller's buffers with set_data_handle), its scratchpad is ours (one buffer grown to the largest
// need) and so are the buffers weight gradients are computed into before they are added to the
// caller's (oneDNN overwrites its diff_weights; the backend contract accumulates): after the first
// call of each shape, no call allocates.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"

namespace baton {

class CpuCnn {
 public:
  CpuCnn();
  ~CpuCnn();
  CpuCnn(const CpuCnn&) = delete;
  CpuCnn& operator=(const CpuCnn&) = delete;

  void conv2d_forward(float* y, const float* x, const float* w, const float* bias, const Conv2d& c);
  void conv2d_backward(float* dx, float* dw, float* db, const float* dy, const float* x, const float* w,
                       const Conv2d& c);
  // Native bf16 (backend.h CpuBf16::NATIVE): bf16 x, w, y, dy, dx; fp32 bias, dw, db; fp32 accumulation.
  void conv2d_forward_bf16(uint16_t* y, const uint16_t* x, const uint16_t* w, const float* bias, const Conv2d& c);
  void conv2d_backward_bf16(uint16_t* dx, float* dw, float* db, const uint16_t* dy, const uint16_t* x,
                            const uint16_t* w, const Conv2d& c);
  void batchnorm_forward(float* y, float* mean, float* var, const float* x, const float* gamma,
                         const float* beta, int N, int C, int HW, float eps, bool training);
  void batchnorm_backward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                          const float* mean, const float* var, const float* gamma, int N, int C, int HW,
                          float eps);
  // The fused forms (backend.h batchnorm_relu_forward, relu_batchnorm_backward; cpu_batchnorm.h).
  void batchnorm_relu_forward(float* y, float* mean, float* var, const float* x, const float* gamma,
                              const float* beta, const float* residual, int N, int C, int HW, float eps,
                              bool training);
  void relu_batchnorm_backward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                               const float* mean, const float* var, const float* gamma, const float* beta, int N,
                               int C, int HW, float eps);
  // oneDNN's name of the kernel that runs this convolution's forward (e.g. "brgconv:avx512_core",
  // "jit_wino_4x3:avx512_core"; the backward passes use the same algorithm): what tests observe the
  // BATON_CPU_CONV choice by.
  std::string conv2d_kernel(const Conv2d& c, bool bf16 = false);
  size_t pool2d_workspace_bytes(const Pool2d& p);
  void pool2d_forward(float* y, void* workspace, const float* x, const Pool2d& p);
  void pool2d_backward(float* dx, const float* dy, const void* workspace, const Pool2d& p);

 private:
  void conv_forward(void* y, const void* x, const void* w, const float* bias, const Conv2d& c, bool bf16);
  void conv_backward(void* dx, float* dw, float* db, const void* dy, const void* x, const void* w, const Conv2d& c,
                     bool bf16);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace baton
