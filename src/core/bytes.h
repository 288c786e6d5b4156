// Byte counts and other counts as people read them: "16 GiB", "1.5 MiB", "12 B" (binary units,
// three significant digits at most); "1.25M" tokens, "23.8k" tokens/s (decimal units).
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

// 1.25G, 3.40M, 23.8k, 512.
inline std::string human_count(double x) {
  if (x >= 1e9) return fmt::format("{:.2f}G", x / 1e9);
  if (x >= 1e6) return fmt::format("{:.2f}M", x / 1e6);
  if (x >= 1e3) return fmt::format("{:.1f}k", x / 1e3);
  return fmt::format("{:.0f}", x);
}

}  // namespace baton
