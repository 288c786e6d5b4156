#include "backend/device.h"

#include <fmt/format.h>
#include <omp.h>

#include <fstream>

#include "core/error.h"

namespace baton {
namespace {

std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto pos = line.find(':');
      if (pos != std::string::npos) return line.substr(pos + 2);
    }
  }
  return "unknown CPU";
}

}  // namespace

BackendChoice choose_backend(const std::string& device) {
  BATON_REQUIRE(device == "auto" || device == "cpu" || device == "cuda",
                fmt::format("precision.device = \"{}\" is not a device", device),
                "use \"auto\", \"cpu\" or \"cuda\"");
  BackendChoice c;
  if (device != "cpu") {
    CudaDeviceInfo info = detect_cuda();
    // The CUDA backend (kernels/, src/backend/cuda) is issue 6; until it exists every run is CPU.
    if (device == "cuda")
      throw Error(info.count > 0
                      ? fmt::format("this build of baton has no CUDA training backend yet (found {})", info.name)
                      : "precision.device = \"cuda\" but no CUDA training backend is available",
                  "set precision.device = \"cpu\" (or \"auto\") to train on the CPU");
    if (info.count > 0)
      c.note = fmt::format("found {} but the CUDA training backend is not built yet; using the CPU",
                           info.name);
  }
  c.backend = make_cpu_backend();
  c.device = "cpu";
  c.device_name = fmt::format("{} ({} threads)", cpu_model_name(), omp_get_max_threads());
  return c;
}

double peak_tflops_for(const std::string& name) {
  if (name.find("A100") != std::string::npos) return 312.0;
  if (name.find("H100") != std::string::npos || name.find("H200") != std::string::npos) return 989.0;
  return 0.0;
}

}  // namespace baton
