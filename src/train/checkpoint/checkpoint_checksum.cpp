#include "train/checkpoint/checkpoint_checksum.h"

#include <fmt/format.h>

#include <cstring>
#include <vector>

#include "core/rng.h"

namespace baton {

uint64_t checksum_box(const float* box, std::span<const int64_t> full_shape,
                      std::span<const int64_t> offset, std::span<const int64_t> extent) {
  const size_t nd = full_shape.size();
  if (nd == 0) {  // a scalar: one element at index 0
    uint32_t bits;
    std::memcpy(&bits, box, sizeof bits);
    return splitmix64(bits);
  }
  // The box is a set of rows along the last dimension; each row is contiguous both in `box` and in
  // the full tensor, so only the row's starting global index has to be computed.
  const int64_t row_len = extent[nd - 1];
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < nd; ++d) rows *= extent[d];
  if (row_len == 0 || rows == 0) return 0;
  uint64_t sum = 0;  // unsigned wrap-around is the mod 2^64 of the definition
#pragma omp parallel for reduction(+ : sum) schedule(static) if (rows * row_len > (1 << 16))
  for (int64_t r = 0; r < rows; ++r) {
    // Global linear index of the row's first element: unravel r over the box's leading dims.
    int64_t rem = r, index = 0, stride = full_shape[nd - 1];
    index += offset[nd - 1];
    for (size_t d = nd - 1; d-- > 0;) {
      const int64_t coord = rem % extent[d] + offset[d];
      rem /= extent[d];
      index += coord * stride;
      stride *= full_shape[d];
    }
    const float* src = box + r * row_len;
    uint64_t s = 0;
    for (int64_t j = 0; j < row_len; ++j) {
      uint32_t bits;
      std::memcpy(&bits, src + j, sizeof bits);
      s += splitmix64((uint64_t(index + j) << 32) | bits);
    }
    sum += s;
  }
  return sum;
}

uint64_t checksum_tensor(const float* data, std::span<const int64_t> shape) {
  const std::vector<int64_t> zeros(shape.size(), 0);
  return checksum_box(data, shape, zeros, shape);
}

std::string checksum_hex(uint64_t c) { return fmt::format("0x{:016x}", c); }

}  // namespace baton
