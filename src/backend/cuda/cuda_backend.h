// CudaBackend: baton::Backend on one NVIDIA GPU, fp32 or bf16 (issue 6; docs/cuda.md); the CNN ops
// through cuDNN (issue 12, cudnn_ops.h).
// The ops are the kernels of kernels/ (CUDA only) plus cuBLAS fp32 GEMMs with TF32 disabled, all
// on one stream, so they agree with the CPU backend to summation-order rounding and are
// deterministic (same inputs -> same bits). Memory comes from a device arena (cudaMalloc'd chunks
// sub-allocated with a free list), so after the first step no op calls cudaMalloc.
// This header has no CUDA types: code built without nvcc can include it.
#pragma once
#include <cstddef>
#include <memory>

#include "backend/attention_kernel.h"
#include "backend/backend.h"

namespace baton {

// Throws baton::Error when there is no usable CUDA device `device`. `act`: F32, or BF16 for
// mixed precision (bf16 activations and compute weights, cuBLASLt GEMMs, flash attention).
// `attention`: which attention kernel (attention_kernel.h); FLASH and CUDNN need BF16.
std::unique_ptr<Backend> make_cuda_backend(int device = 0, DType act = DType::F32,
                                           AttentionKernel attention = AttentionKernel::AUTO);

struct CudaMemoryStats {
  size_t reserved_bytes = 0;     // cudaMalloc'd by the arena (held until the backend is destroyed)
  size_t in_use_bytes = 0;       // handed out by alloc() (and the backend's own scratch)
  size_t peak_in_use_bytes = 0;
  int device_mallocs = 0;        // cudaMalloc calls so far (constant after warm-up)
};
// Stats of a backend made by make_cuda_backend (throws Error for any other backend).
CudaMemoryStats cuda_memory_stats(Backend& backend);

// The bf16 convolution weight gradient widens x and dy to fp32 a batch chunk at a time, the
// copies taking at most `bytes` (at least one sample; default 256 MiB). For tests of the chunking.
void set_cuda_cnn_widen_budget(Backend& backend, size_t bytes);

}  // namespace baton
