#include "core/dtype.h"

#include "core/error.h"

namespace baton {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::BF16: return 2;
    case DType::U8: return 1;
  }
  BATON_ASSERT(false, "unknown DType {}", static_cast<int>(t));
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "fp32";
    case DType::F64: return "fp64";
    case DType::I32: return "int32";
    case DType::I64: return "int64";
    case DType::BF16: return "bf16";
    case DType::U8: return "uint8";
  }
  return "?";
}

}  // namespace baton
