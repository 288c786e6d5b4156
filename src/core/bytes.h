// Byte counts as people read them: "16 GiB", "1.5 MiB", "12 B" (binary units, three significant
// digits at most).
#pragma once
#include <fmt/format.h>

#include <string>

namespace baton {

inline std::string format_bytes(double bytes) {
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) bytes /= 1024, ++u;
  return fmt::format("{:.3g} {}", bytes, kUnits[u]);
}

}  // namespace baton
