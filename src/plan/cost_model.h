// The analytical cost model: how long a layer takes on a device and how long a collective or a
// point-to-point transfer takes on a link. One set of assumptions (Assumptions, documented in
// docs/planner.md) serves every prediction — nothing is fitted per model or per layout.
//
// Compute: a layer's time is its matmul FLOPs at `gemm_efficiency` of the device's peak for the
// dtype, plus its non-matmul memory traffic at `mem_efficiency` of the memory bandwidth (roofline,
// the two phases not overlapped). Communication: time = bytes / bandwidth (notes-pipedream §2);
// a ring all-reduce over n ranks moves 2(n−1)/n of the payload through each rank's link.
#pragma once
#include <string>

#include "plan/device.h"
#include "plan/model_desc.h"

namespace baton::plan {

struct Assumptions {
  double gemm_efficiency = 0.70;  // achieved / peak tensor-core FLOP/s on large matmuls
  double mem_efficiency = 0.80;   // achieved / peak memory bandwidth on elementwise kernels
  double grad_bytes = 4;          // gradients are accumulated and all-reduced in fp32 (DESIGN §5)
  // Memory per parameter: bf16/fp16 weights 2 + fp32 master 4 + fp32 grad 4 + Adam m, v 8 = 18;
  // fp32 training 4 + 4 + 8 = 16. With ZeRO-1 the 12 (resp. 8) optimizer bytes are split over dp.
  double overhead_gb = 3;         // CUDA context, NCCL buffers, allocator fragmentation per GPU
  double optimizer_bytes_per_param = 32;  // memory traffic of the Adam step (read/write m, v, w, g)
};

struct LayerTime {
  double fwd = 0, bwd = 0;  // seconds per micro-batch
};

// Compute time of `layer` on `dev` (no tensor-parallel communication).
LayerTime layer_time(const LayerDesc& layer, const DeviceType& dev, const std::string& dtype,
                     const Assumptions& a);

// Seconds for a ring all-reduce of `bytes` over `n` ranks whose per-rank bus bandwidth is `gbs`.
double allreduce_time(double bytes, int n, double gbs);
// Seconds to move `bytes` over a link of `gbs`.
double transfer_time(double bytes, double gbs);

// Bytes of weight + gradient + optimizer state per parameter for the compute dtype.
double state_bytes_per_param(const std::string& dtype, bool zero1, int dp);

}  // namespace baton::plan
