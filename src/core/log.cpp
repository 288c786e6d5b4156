#include "core/log.h"

#include <cstdio>

namespace baton::log {
namespace {
int g_rank = 0;
int g_world = 1;
bool g_logs = true;
}  // namespace

void set_rank(int rank, int world_size, bool this_rank_logs) {
  g_rank = rank;
  g_world = world_size;
  g_logs = this_rank_logs;
}

bool enabled() { return g_logs; }

void write_info(const std::string& line) {
  if (g_world > 1 && g_rank != 0) std::fprintf(stdout, "[rank %d] ", g_rank);  // --log-all-ranks
  std::fputs(line.c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

void write_warn(const std::string& line) {
  if (g_world > 1)
    std::fprintf(stderr, "warning: [rank %d] %s\n", g_rank, line.c_str());
  else
    std::fprintf(stderr, "warning: %s\n", line.c_str());
  std::fflush(stderr);
}

}  // namespace baton::log
