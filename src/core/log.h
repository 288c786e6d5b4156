// Logging: rank-aware, line-buffered. Only the logging rank prints info lines (rank 0 unless
// configured otherwise); warnings and errors print on every rank, prefixed with the rank when the
// job has several.
#pragma once
#include <fmt/format.h>

#include <string>

namespace baton::log {

void set_rank(int rank, int world_size, bool this_rank_logs);
bool enabled();
void write_info(const std::string& line);
void write_warn(const std::string& line);

template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled()) write_info(fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  write_warn(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace baton::log
