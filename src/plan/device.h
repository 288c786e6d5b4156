// Device types the planner knows: peak dense throughput per dtype, memory and memory bandwidth.
// Figures are the vendors' data-sheet numbers (dense, no sparsity) and, for the HetPipe GPUs, the
// paper's Table 1 (notes-hetpipe-madpipe §A.7). A peak of 0 means the dtype has no fast path on
// that device (e.g. bf16 before Ampere); planning a bf16 run on it is an error.
#pragma once
#include <string>
#include <vector>

namespace baton::plan {

struct DeviceType {
  std::string name;        // as written in cluster files, e.g. "A100-80GB"
  double peak_bf16 = 0;    // TFLOP/s, dense tensor-core
  double peak_fp16 = 0;    // TFLOP/s, dense tensor-core (fp16 with fp32 accumulate)
  double peak_fp32 = 0;    // TFLOP/s, plain fp32 (no TF32)
  double memory_gb = 0;    // GB (10^9 bytes) of device memory
  double mem_bw_gbs = 0;   // GB/s of device-memory bandwidth

  // Peak TFLOP/s for "bf16" | "fp16" | "fp32"; 0 when unsupported.
  double peak(const std::string& dtype) const;
};

// The built-in table, in a stable order.
const std::vector<DeviceType>& device_table();
// Case-insensitive lookup by name or alias ("A100" = "A100-80GB", "V100" = "V100-SXM2-16GB", ...);
// throws Error listing the known names.
const DeviceType& find_device(const std::string& name);

}  // namespace baton::plan
