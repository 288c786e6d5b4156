// Backend::set_memory_limit's default (backend.h): only the CPU backend emulates a device's memory.
// In a file of its own: as the class's first out-of-line virtual it carries Backend's vtable, which
// every backend (the emulated CUDA one too) needs without the device detection of device.cpp.
#include <fmt/format.h>

#include "backend/backend.h"
#include "core/error.h"

namespace baton {

void Backend::set_memory_limit(const MemoryLimit& limit) {
  BATON_REQUIRE(limit.bytes == 0,
                fmt::format("rank {}: a memory limit ({}) is emulated on the CPU backend only, not on {}", limit.rank,
                            limit.device.empty() ? "hetero.memory_limit" : limit.device, name()),
                "on GPU ranks the device's own memory is the limit: set hetero.memory_limit = 0 for them (or "
                "precision.device = \"cpu\")");
}

}  // namespace baton
