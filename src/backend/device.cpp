#include "backend/device.h"

#include <fmt/format.h>
#include <omp.h>

#include <cstdlib>
#include <fstream>

#include "core/error.h"
#ifdef BATON_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

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

DType parse_compute_dtype(const std::string& compute) {
  if (compute == "fp32") return DType::F32;
  if (compute == "bf16") return DType::BF16;
  throw Error(fmt::format("precision.compute = \"{}\" is not a compute type", compute),
              "use \"bf16\" (mixed precision: bf16 compute, fp32 master weights) or \"fp32\"");
}

BackendChoice choose_backend(const std::string& device, DType compute, int local_rank,
                             AttentionKernel attention) {
  BATON_REQUIRE(device == "auto" || device == "cpu" || device == "cuda",
                fmt::format("precision.device = \"{}\" is not a device", device),
                "use \"auto\", \"cpu\" or \"cuda\"");
  BackendChoice c;
  if (device != "cpu") {
    CudaDeviceInfo info = detect_cuda();
#ifdef BATON_HAVE_CUDA
    if (device == "cuda") {
      BATON_REQUIRE(info.count > 0,
                    fmt::format("precision.device = \"cuda\" but no CUDA device is visible ({})",
                                info.error.empty() ? "0 devices" : info.error),
                    "run on a GPU node (check nvidia-smi and CUDA_VISIBLE_DEVICES), or set "
                    "precision.device = \"cpu\"");
      c.cuda_device = local_rank % info.count;
      c.backend = make_cuda_backend(c.cuda_device, compute, attention);
      c.device = "cuda";
      c.device_name = info.name;
      return c;
    }
    // "auto": the CUDA backend (fp32, docs/cuda.md) has not yet passed `ctest -L gpu` on a GPU, so
    // auto stays on the CPU until a GPU session validates it; "cuda" opts in explicitly.
    if (info.count > 0)
      c.note = fmt::format("found {} but the CUDA backend has not been validated on a GPU yet; "
                           "using the CPU (set precision.device = \"cuda\" to use it)",
                           info.name);
#else
    if (device == "cuda")
      throw Error("precision.device = \"cuda\" but this build of baton has no CUDA backend",
                  "rebuild with CUDA (cmake -DBATON_CUDA=ON, nvcc on the PATH), or set "
                  "precision.device = \"cpu\"");
#endif
  }
  // The CPU backend has one attention: a GPU kernel named explicitly is an error, not ignored.
  BATON_REQUIRE(attention == AttentionKernel::AUTO,
                fmt::format("precision.attention = \"{}\" selects a CUDA kernel, but this run uses the CPU{}",
                            to_string(attention),
                            device == "auto" ? " (precision.device = \"auto\" chose it)" : ""),
                "set precision.attention = \"auto\" on the CPU, or precision.device = \"cuda\" on a GPU");
  // BATON_CPU_BF16 = "auto" (default) | "native" | "emulated": how the CPU computes bf16 (backend.h
  // CpuBf16). An environment knob, not a config key: it changes speed and summation order only.
  const char* knob = std::getenv("BATON_CPU_BF16");
  const CpuBf16 mode = knob && *knob ? parse_cpu_bf16(knob, "BATON_CPU_BF16") : CpuBf16::AUTO;
  c.backend = make_cpu_backend(compute, mode);
  if (compute != DType::F32)
    c.note += std::string(c.note.empty() ? "" : "; ") +
              (c.backend->name() == "cpu (bf16 native)"
                   ? "bf16 on the CPU is native: matmuls and convolutions in bf16 with fp32 accumulation "
                     "(oneDNN; BATON_CPU_BF16=emulated for the emulation)"
                   : "bf16 on the CPU is emulated (bf16 storage, fp32 arithmetic: this CPU has no avx512_bf16 / "
                     "amx_bf16, or BATON_CPU_BF16=emulated); it is slower than fp32");
  c.device = "cpu";
  c.device_name = fmt::format("{} ({} threads)", cpu_model_name(), omp_get_max_threads());
  return c;
}

}  // namespace baton
