// The device table (device_table.h). Sources: NVIDIA data sheets — A100 SXM4 80GB / 40GB, A100
// PCIe 80GB / 40GB, H100 SXM5 and PCIe, H200 SXM, V100 SXM2 / PCIe, TITAN V, TITAN RTX, GeForce RTX
// 2060, Quadro P4000 (sparsity figures halved to dense) — and HetPipe Table 1 for memory size and
// bandwidth of its four GPUs. Tensor-core fp16 figures of the Turing/Volta consumer cards are the
// data-sheet "Tensor TFLOPS"; Pascal (P4000) has no tensor cores and a 1/64-rate fp16 path, so its
// fp16 entry is its fp32 rate (frameworks run fp16 math in fp32 there). Runtime names are what
// cudaGetDeviceProperties reports for exactly that part; variants not listed (H100 NVL, H200 NVL,
// V100 32GB, ...) are unknown rather than matched to a relative with other peaks.
#include "core/device_table.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"

namespace baton {
namespace {

// Upper-case letters and digits only: "Titan V" = "TITAN-V", "NVIDIA A100-SXM4-80GB" =
// "NVIDIAA100SXM480GB".
std::string norm(std::string_view s) {
  std::string out;
  for (char c : s)
    if (std::isalnum(static_cast<unsigned char>(c))) out += static_cast<char>(std::toupper(c));
  return out;
}

// The runtime's vendor prefixes ("NVIDIA H200", "Tesla V100-SXM2-16GB"), dropped before matching.
std::string drop_vendor(std::string n) {
  for (const char* v : {"NVIDIA", "TESLA"})
    if (n.rfind(v, 0) == 0) n.erase(0, std::string_view(v).size());
  return n;
}

}  // namespace

double DeviceSpec::peak(std::string_view dtype) const {
  if (dtype == "bf16") return peak_bf16;
  if (dtype == "fp16") return peak_fp16;
  if (dtype == "fp32") return peak_fp32;
  throw Error(fmt::format("unknown compute dtype '{}'", dtype), "use bf16, fp16 or fp32");
}

double DeviceSpec::peak(DType compute) const {
  switch (compute) {
    case DType::F32: return peak_fp32;  // plain fp32: baton's cuBLAS calls never use TF32
    case DType::BF16: return peak_bf16;
    default: return 0;                  // not a compute dtype
  }
}

const std::vector<DeviceSpec>& device_specs() {
  // name, bf16, fp16, fp32 TFLOP/s, memory GB, bandwidth GB/s, aliases, runtime names
  static const std::vector<DeviceSpec> table = {
      {"A100-80GB", 312, 312, 19.5, 80, 2039, {"A100"}, {"A100-SXM4-80GB"}},
      {"A100-40GB", 312, 312, 19.5, 40, 1555, {}, {"A100-SXM4-40GB"}},
      {"A100-80GB-PCIE", 312, 312, 19.5, 80, 1935, {}, {"A100 80GB PCIe"}},
      {"A100-40GB-PCIE", 312, 312, 19.5, 40, 1555, {}, {"A100-PCIE-40GB"}},
      {"H100-SXM", 989, 989, 67, 80, 3350, {"H100"}, {"H100 80GB HBM3"}},
      {"H100-PCIE", 756, 756, 51, 80, 2000, {}, {"H100 PCIe"}},
      {"H200", 989, 989, 67, 141, 4800, {}, {"H200"}},
      {"V100-SXM2-16GB", 0, 125, 15.7, 16, 900, {"V100", "V100-SXM2"}, {"V100-SXM2-16GB"}},
      {"V100-PCIE-16GB", 0, 112, 14, 16, 900, {"V100-PCIE"}, {"V100-PCIE-16GB"}},
      {"TITAN-V", 0, 110, 14.9, 12, 653, {}, {"TITAN V"}},
      {"TITAN-RTX", 0, 130, 16.3, 24, 672, {}, {"TITAN RTX"}},
      {"RTX-2060", 0, 51.6, 6.45, 6, 336, {"GEFORCE-RTX-2060"}, {"GeForce RTX 2060"}},
      {"QUADRO-P4000", 0, 5.3, 5.3, 8, 243, {"P4000"}, {"Quadro P4000"}},
  };
  return table;
}

const DeviceSpec& find_device_spec(std::string_view name) {
  const std::string want = norm(name);
  for (const DeviceSpec& d : device_specs()) {
    if (norm(d.name) == want) return d;
    for (const std::string& a : d.aliases)
      if (norm(a) == want) return d;
  }
  std::vector<std::string> names;
  for (const DeviceSpec& d : device_specs()) names.push_back(d.name);
  throw Error(fmt::format("unknown device type '{}'", name),
              fmt::format("use one of: {}", fmt::join(names, ", ")));
}

const DeviceSpec* device_for_runtime_name(std::string_view runtime_name) {
  const std::string want = drop_vendor(norm(runtime_name));
  if (want.empty()) return nullptr;
  for (const DeviceSpec& d : device_specs())
    for (const std::string& r : d.runtime_names)
      if (drop_vendor(norm(r)) == want) return &d;
  return nullptr;
}

double dense_peak_tflops(std::string_view runtime_name, DType compute) {
  const DeviceSpec* d = device_for_runtime_name(runtime_name);
  return d ? d->peak(compute) : 0.0;
}

}  // namespace baton
