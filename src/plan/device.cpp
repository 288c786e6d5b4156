// The device table. Sources: NVIDIA data sheets (A100 SXM 80GB, H100 SXM, H200 SXM, V100 SXM2 /
// PCIe, TITAN V, TITAN RTX, RTX 2060, Quadro P4000) and HetPipe Table 1 for memory size and
// bandwidth of its four GPUs. Tensor-core fp16 figures of the Turing/Volta consumer cards are the
// data-sheet "Tensor TFLOPS"; Pascal (P4000) has no tensor cores and a 1/64-rate fp16 path, so its
// fp16 entry is its fp32 rate (frameworks run fp16 math in fp32 there).
#include "plan/device.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"

namespace baton::plan {

double DeviceType::peak(const std::string& dtype) const {
  if (dtype == "bf16") return peak_bf16;
  if (dtype == "fp16") return peak_fp16;
  if (dtype == "fp32") return peak_fp32;
  throw Error(fmt::format("unknown compute dtype '{}'", dtype), "use bf16, fp16 or fp32");
}

const std::vector<DeviceType>& device_table() {
  // name, bf16, fp16, fp32, memory GB, bandwidth GB/s
  static const std::vector<DeviceType> table = {
      {"A100-80GB", 312, 312, 19.5, 80, 2039},
      {"A100-40GB", 312, 312, 19.5, 40, 1555},
      {"H100-SXM", 989, 989, 67, 80, 3350},
      {"H200", 989, 989, 67, 141, 4800},
      {"V100-SXM2-16GB", 0, 125, 15.7, 16, 900},
      {"V100-PCIE-16GB", 0, 112, 14, 16, 900},
      {"TITAN-V", 0, 110, 14.9, 12, 653},
      {"TITAN-RTX", 0, 130, 16.3, 24, 672},
      {"RTX-2060", 0, 51.6, 6.45, 6, 336},
      {"QUADRO-P4000", 0, 5.3, 5.3, 8, 243},
  };
  return table;
}

namespace {
std::string norm(std::string s) {
  std::string out;
  for (char c : s)
    if (std::isalnum(static_cast<unsigned char>(c))) out += static_cast<char>(std::toupper(c));
  return out;
}
}  // namespace

const DeviceType& find_device(const std::string& name) {
  static const std::vector<std::pair<std::string, std::string>> aliases = {
      {"A100", "A100-80GB"},         {"H100", "H100-SXM"},
      {"V100", "V100-SXM2-16GB"},    {"V100-PCIE", "V100-PCIE-16GB"},
      {"V100-SXM2", "V100-SXM2-16GB"}, {"TITANV", "TITAN-V"},
      {"TITANRTX", "TITAN-RTX"},     {"GEFORCE-RTX-2060", "RTX-2060"},
      {"P4000", "QUADRO-P4000"}};
  std::string want = norm(name);
  for (const auto& [alias, target] : aliases)
    if (norm(alias) == want) want = norm(target);
  for (const auto& d : device_table())
    if (norm(d.name) == want) return d;
  std::vector<std::string> names;
  for (const auto& d : device_table()) names.push_back(d.name);
  throw Error(fmt::format("unknown device type '{}'", name),
              fmt::format("use one of: {}", fmt::join(names, ", ")));
}

}  // namespace baton::plan
