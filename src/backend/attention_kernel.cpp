// precision.attention's names (attention_kernel.h). Its own file: the CUDA backend uses to_string
// without pulling in device selection (backend/device.cpp).
#include "backend/attention_kernel.h"

#include <fmt/format.h>

#include "core/error.h"

namespace baton {

AttentionKernel parse_attention_kernel(const std::string& name) {
  if (name == "auto") return AttentionKernel::AUTO;
  if (name == "flash") return AttentionKernel::FLASH;
  if (name == "cudnn") return AttentionKernel::CUDNN;
  throw Error(fmt::format("precision.attention = \"{}\" is not an attention kernel", name),
              "use \"auto\" (the backend's default), \"flash\" (baton's flash kernel) or \"cudnn\" (cuDNN's "
              "fused flash attention)");
}

const char* to_string(AttentionKernel k) {
  switch (k) {
    case AttentionKernel::AUTO: return "auto";
    case AttentionKernel::FLASH: return "flash";
    case AttentionKernel::CUDNN: return "cudnn";
  }
  return "?";
}

}  // namespace baton
