// The one device table: per device type, the dense peak TFLOP/s per compute dtype, memory and
// memory bandwidth, the names cluster files use (the planner, plan/device.h) and the names the
// CUDA runtime reports (the trainer's and `baton bench`'s MFU). Figures are the vendors' data-sheet
// numbers, dense (no 2:4 sparsity), and, for the HetPipe GPUs, that paper's Table 1
// (notes-hetpipe-madpipe §A.7).
//
// Which peak an MFU divides by is the peak of the math the run executes:
// - bf16 runs: the dense bf16 tensor-core peak (A100 312, H100 SXM / H200 989 TFLOP/s);
// - fp32 runs: the plain fp32 (FMA) peak, not TF32. baton's CUDA backend sets
//   CUBLAS_PEDANTIC_MATH and uses CUBLAS_COMPUTE_32F(_PEDANTIC), so cuBLAS never uses TF32 tensor
//   cores for fp32 (src/backend/cuda/cuda_backend.cpp, kernels/gemm.cu, kernels/gemm_lt.cuh), and
//   dividing by the TF32 peak (8x higher on an A100) would understate MFU eightfold.
// A peak of 0 means the dtype has no fast path on that device (bf16 before Ampere) or the device is
// unknown: callers report no MFU rather than a wrong one.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"

namespace baton {

struct DeviceSpec {
  std::string name;        // as written in cluster files, e.g. "A100-80GB"
  double peak_bf16 = 0;    // TFLOP/s, dense tensor-core
  double peak_fp16 = 0;    // TFLOP/s, dense tensor-core (fp16 with fp32 accumulate)
  double peak_fp32 = 0;    // TFLOP/s, plain fp32 (no TF32)
  double memory_gb = 0;    // GB (10^9 bytes) of device memory
  double mem_bw_gbs = 0;   // GB/s of device-memory bandwidth
  std::vector<std::string> aliases;        // other names cluster files may use ("A100")
  std::vector<std::string> runtime_names;  // as the CUDA runtime names it, vendor prefix dropped

  // Peak TFLOP/s for "bf16" | "fp16" | "fp32" (the planner's dtypes); 0 when unsupported; Error for
  // another string.
  double peak(std::string_view dtype) const;
  // Peak TFLOP/s for a run's compute dtype (F32: plain fp32, BF16); 0 for other dtypes.
  double peak(DType compute) const;
};

// The table, in a stable order.
const std::vector<DeviceSpec>& device_specs();

// Cluster files: by name or alias, ignoring case and punctuation ("a100", "Titan V"); throws Error
// listing the known names.
const DeviceSpec& find_device_spec(std::string_view name);

// The runtime: the device whose runtime name is `runtime_name` (cudaDeviceProp::name, e.g.
// "NVIDIA H100 80GB HBM3"; a leading "NVIDIA" or "Tesla" and punctuation ignored, otherwise an
// exact match, so "NVIDIA H100 PCIe" is not taken for the SXM part); null when unknown (CPUs).
const DeviceSpec* device_for_runtime_name(std::string_view runtime_name);

// Dense peak TFLOP/s of `runtime_name` for `compute`; 0 when the device or dtype is unknown.
double dense_peak_tflops(std::string_view runtime_name, DType compute);

}  // namespace baton
