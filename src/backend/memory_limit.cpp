// Backend::set_memory_limit's default (backend.h) and the error every backend raises when an
// allocation would pass the limit. In a file of its own: as the class's first out-of-line virtual it carries Backend's vtable, which
// every backend (the emulated CUDA one too) needs without the device detection of device.cpp.
#include <fmt/format.h>

#include "backend/backend.h"
#include "core/bytes.h"
#include "core/error.h"

namespace baton {

void Backend::set_memory_limit(const MemoryLimit& limit) {
  BATON_REQUIRE(limit.bytes == 0,
                fmt::format("rank {}: a memory limit ({}) cannot be kept by the {} backend", limit.rank,
                            limit.device.empty() ? "hetero.memory_limit" : limit.device, name()),
                "set hetero.memory_limit = 0 for this rank (or precision.device = \"cpu\")");
}

Error memory_limit_error(const MemoryLimit& limit, size_t bytes, size_t in_use) {
  return Error(fmt::format("out of memory on rank {}{}: allocating {} with {} in use would exceed its memory "
                           "limit of {}", limit.rank,
                           limit.device.empty() ? std::string() : fmt::format(" (emulating {})", limit.device),
                           format_bytes(double(bytes)), format_bytes(double(in_use)), format_bytes(double(limit.bytes))),
               fmt::format("the device could not hold this: run fewer minibatches in flight (hetero.nm), a smaller "
                           "train.micro_batch, a device with more memory for rank {} in hetero.virtual_workers, or "
                           "raise hetero.memory_limit ({} bytes asked, limit {} bytes)", limit.rank, bytes,
                           limit.bytes));
}

}  // namespace baton
