// Which device a run uses: precision.device = "auto" | "cpu" | "cuda". A binary linked against
// cudart runs on machines without a GPU as long as it makes no other CUDA call, so detection is
// done at run time.
#pragma once
#include <memory>
#include <string>

#include "backend/attention_kernel.h"
#include "backend/backend.h"
#include "core/device_table.h"  // dense_peak_tflops(device_name, compute): the MFU peak

namespace baton {

struct CudaDeviceInfo {
  int count = 0;        // visible CUDA devices (0 when none, or built without CUDA)
  std::string name;     // of device 0
  size_t memory_bytes = 0;
  int sm_major = 0, sm_minor = 0;
  std::string error;    // why count is 0, when the runtime said so
};

CudaDeviceInfo detect_cuda();

struct BackendChoice {
  std::unique_ptr<Backend> backend;
  std::string device;       // "cpu" | "cuda"
  std::string device_name;  // for the log header and peak-FLOPs lookup
  std::string note;         // why this choice (e.g. auto fell back to the CPU)
  int cuda_device = -1;     // the GPU used (device == "cuda")
};

// Throws baton::Error when `device` asks for something this build or machine cannot provide.
// `compute`: the activations' dtype (precision.compute). bf16 on the CPU: native where the CPU has
// avx512_bf16 / amx_bf16, else emulated; the environment's BATON_CPU_BF16 (auto | native | emulated)
// overrides (backend.h CpuBf16).
// `local_rank`: this rank's index on its node; a CUDA run uses GPU local_rank % (visible GPUs).
// `attention`: precision.attention; anything but AUTO is a CUDA kernel, an Error on the CPU.
BackendChoice choose_backend(const std::string& device, DType compute = DType::F32,
                             int local_rank = 0, AttentionKernel attention = AttentionKernel::AUTO);
// precision.compute: "fp32" | "bf16" (Error with a hint otherwise).
DType parse_compute_dtype(const std::string& compute);

}  // namespace baton
