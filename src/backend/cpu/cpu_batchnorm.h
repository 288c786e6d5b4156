// Batch normalization on the CPU (backend.h batchnorm_forward / batchnorm_backward; issue 25 item
// 1), NHWC: M = N·HW rows of C channels. Every per-channel sum — Σx and Σx² (one pass; in double
// the variance E[x²] − mean² loses nothing that matters) and the backward's Σ dy and Σ dy·(x − mean)
// — accumulates in double over fixed blocks of rows, and the blocks' partial sums are added in
// block order. So
// the statistics are as accurate as the fp32 inputs allow (oneDNN 2.6's kernel summed the M values
// one at a time in fp32: batch means 3.3e-4 from fp64 at the fashion ResNet's shapes, gradients
// 2–5% off), and the result does not depend on the number of threads. Forward in training returns
// the batch's mean and biased variance (what the model's running statistics update reads);
// inference normalizes with the given ones. Backward accumulates into dgamma and dbeta.
#pragma once
#include <vector>

namespace baton {

class CpuBatchNorm {
 public:
  void forward(float* y, float* mean, float* var, const float* x, const float* gamma, const float* beta, int N,
               int C, int HW, float eps, bool training);
  void backward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x, const float* mean,
                const float* var, const float* gamma, int N, int C, int HW, float eps);

 private:
  std::vector<double> partial_;  // per block of rows, per channel (grown once per shape)
  std::vector<double> sums_;
  std::vector<float> coef_;  // per channel: the forward's scale; the backward's a, b, k
};

}  // namespace baton
