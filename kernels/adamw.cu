// AdamW kernels: the CPU twin's expression order (cpu_adamw.cpp), IEEE sqrt and division.
#include "kernels/adamw.cuh"
#include "kernels/common.cuh"

namespace baton::kernels {
namespace {

constexpr int kMultiThreads = 256;

// One element's update; both kernels use it, so a tensor's results are the same bits whichever
// kernel updates it.
__device__ __forceinline__ void adamw_element(float* param, const float* grad, float* m, float* v,
                                              size_t i, const AdamWParams& p, float weight_decay) {
  const float g = grad[i] * p.grad_scale;
  const float mi = p.beta1 * m[i] + (1.0f - p.beta1) * g;
  const float vi = p.beta2 * v[i] + (1.0f - p.beta2) * g * g;
  m[i] = mi;
  v[i] = vi;
  const float mhat = mi / p.bc1, vhat = vi / p.bc2;
  param[i] -= p.lr * (mhat / (sqrtf(vhat) + p.eps) + weight_decay * param[i]);
}

__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, size_t n,
                             AdamWParams p) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    adamw_element(param, grad, m, v, i, p, p.weight_decay);
}

__global__ void __launch_bounds__(kMultiThreads)
    adamw_multi_kernel(float* param, const float* grad, float* m, float* v, const AdamWTensor* table,
                       int count, AdamWParams p) {
  const size_t b = blockIdx.x;
  const AdamWTensor t = entry_of_block(table, count, b, &AdamWTensor::first_block);
  const size_t begin = (b - t.first_block) * kAdamWChunk, end = min(t.n, begin + kAdamWChunk);
  float* pp = param + t.param_offset;
  const float* gp = grad + t.param_offset;
  float* mp = m + t.state_offset;
  float* vp = v + t.state_offset;
  for (size_t i = begin + threadIdx.x; i < end; i += kMultiThreads) adamw_element(pp, gp, mp, vp, i, p, t.weight_decay);
}

}  // namespace

void adamw_step(float* param, const float* grad, float* m, float* v, size_t n,
                const AdamWParams& p, cudaStream_t s) {
  if (n == 0) return;
  BATON_KCHECK("adamw_step", param && grad && m && v);
  BATON_KCHECK("adamw_step", p.bc1 > 0.0f && p.bc2 > 0.0f);
  const int blocks = int(std::min<size_t>((n + 255) / 256, 65535u * 8));
  adamw_kernel<<<blocks, 256, 0, s>>>(param, grad, m, v, n, p);
  check_launch("adamw_step");
}

size_t adamw_multi_plan(AdamWTensor* t, size_t count) {
  return plan_block_table(t, count, kAdamWChunk, &AdamWTensor::first_block);
}

void adamw_step_multi(float* param, const float* grad, float* m, float* v, const AdamWTensor* table,
                      size_t count, size_t blocks, const AdamWParams& p, cudaStream_t s) {
  if (blocks == 0) return;
  BATON_KCHECK("adamw_step_multi", param && grad && m && v && table);
  BATON_KCHECK("adamw_step_multi", count > 0 && count < (size_t(1) << 31));
  BATON_KCHECK("adamw_step_multi", blocks < (size_t(1) << 31));
  BATON_KCHECK("adamw_step_multi", p.bc1 > 0.0f && p.bc2 > 0.0f);
  adamw_multi_kernel<<<unsigned(blocks), kMultiThreads, 0, s>>>(param, grad, m, v, table, int(count), p);
  check_launch("adamw_step_multi");
}

}  // namespace baton::kernels
