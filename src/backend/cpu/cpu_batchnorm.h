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
//
// Fused forms (backend.h batchnorm_relu_forward / relu_batchnorm_backward): the forward adds a
// residual and applies the ReLU in its normalising pass; the backward of y = ReLU(bn(x)) recomputes
// the forward's y from x in both of its passes (the same expression, so the same bits) to mask dy,
// instead of a separate ReLU backward writing the masked gradient for it to read.
#pragma once
#include <vector>

namespace baton {

class CpuBatchNorm {
 public:
  // y = bn(x) [+ residual (nullable)] [then ReLU].
  void forward(float* y, float* mean, float* var, const float* x, const float* gamma, const float* beta, int N,
               int C, int HW, float eps, bool training, const float* residual = nullptr, bool relu = false);
  // relu_beta (nullable): the forward's beta when a ReLU followed the batch norm (dy is the
  // gradient at the ReLU's output).
  void backward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x, const float* mean,
                const float* var, const float* gamma, int N, int C, int HW, float eps,
                const float* relu_beta = nullptr);

 private:
  std::vector<double> partial_;  // per block of rows, per channel (grown once per shape)
  std::vector<double> sums_;
  std::vector<float> coef_;  // per channel: the forward's scale; the backward's a, b, k (and scale)
};

}  // namespace baton
