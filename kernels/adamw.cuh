// AdamW step (decoupled weight decay, Adam bias correction), fp32, elementwise:
//   g = grad * grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
//   param -= lr * ((m / bc1) / (sqrt(v / bc2) + eps) + wd * param)
// bc1 = 1 - b1^t and bc2 = 1 - b2^t are computed by the caller (in double, then rounded).
//
// adamw_step_multi: the same update over a list of tensors (each with its offsets, length and
// weight decay) in ONE launch: the blocks are mapped to (tensor, chunk of kAdamWChunk elements)
// through the prefix of the blocks before each tensor (adamw_multi_plan). Each element goes through
// the same device function as adamw_step, so the results are those of one adamw_step per tensor,
// bit for bit (an element's update does not depend on which block runs it).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

namespace baton::kernels {

struct AdamWParams {
  float lr, beta1, beta2, eps, weight_decay, grad_scale, bc1, bc2;
};

void adamw_step(float* param, const float* grad, float* m, float* v, size_t n,
                const AdamWParams& p, cudaStream_t s);

// Elements per block of adamw_step_multi (256 threads, 8 elements each).
inline constexpr size_t kAdamWChunk = 2048;

// One tensor of adamw_step_multi: param/grad at param_offset, m/v at state_offset, n elements
// (tensors must not overlap), its own weight decay (AdamWParams::weight_decay is not used).
struct AdamWTensor {
  size_t param_offset = 0;
  size_t state_offset = 0;
  size_t n = 0;
  size_t first_block = 0;  // set by adamw_multi_plan: blocks of the tensors before this one
  float weight_decay = 0;
};

// Sets first_block of t[0..count) (ceil(n / kAdamWChunk) blocks per tensor, in order) and returns
// the total number of blocks: the table adamw_step_multi takes, to be copied to device memory.
size_t adamw_multi_plan(AdamWTensor* t, size_t count);

// `table`: device memory holding the `count` entries as adamw_multi_plan left them; `blocks`: its
// result. One launch (none when blocks == 0).
void adamw_step_multi(float* param, const float* grad, float* m, float* v, const AdamWTensor* table,
                      size_t count, size_t blocks, const AdamWParams& p, cudaStream_t s);

}  // namespace baton::kernels
