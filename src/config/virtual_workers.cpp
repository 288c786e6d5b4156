// Parsing and checking hetero.virtual_workers (see virtual_workers.h).
#include "config/virtual_workers.h"

#include <fmt/format.h>

#include <charconv>
#include <set>
#include <string_view>

#include "core/error.h"

namespace baton {
namespace {

constexpr const char* kHint =
    "write each virtual worker as its ranks, one per pipeline stage, e.g. virtual_workers = "
    "[\"0\", \"1\", \"2\"] (or leave it empty: one virtual worker per rank)";

std::vector<int> parse_ranks(const std::string& entry, size_t index) {
  std::vector<int> out;
  std::string_view rest = entry;
  while (true) {
    const size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    int r = -1;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), r);
    BATON_REQUIRE(!item.empty() && ec == std::errc() && end == item.data() + item.size() && r >= 0,
                  fmt::format("hetero.virtual_workers[{}] = \"{}\" is not a list of ranks", index, entry), kHint);
    out.push_back(r);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return out;
}

}  // namespace

std::vector<std::vector<int>> virtual_worker_ranks(const HeteroConfig& h, int world_size) {
  std::vector<std::vector<int>> vws;
  if (h.virtual_workers.empty()) {
    for (int r = 0; r < world_size; ++r) vws.push_back({r});
    return vws;
  }
  std::set<int> seen;
  for (size_t i = 0; i < h.virtual_workers.size(); ++i) {
    vws.push_back(parse_ranks(h.virtual_workers[i], i));
    for (int r : vws.back()) {
      BATON_REQUIRE(seen.insert(r).second,
                    fmt::format("hetero.virtual_workers names rank {} twice (entry {})", r, i), kHint);
      BATON_REQUIRE(world_size <= 0 || r < world_size,
                    fmt::format("hetero.virtual_workers[{}] names rank {}, but the job has {} rank{}", i, r,
                                world_size, world_size == 1 ? "" : "s"),
                    fmt::format("launch more ranks or name ranks 0..{}", world_size - 1));
    }
  }
  BATON_REQUIRE(world_size <= 0 || static_cast<int>(seen.size()) == world_size,
                fmt::format("hetero.virtual_workers places {} of the job's {} ranks", seen.size(), world_size),
                fmt::format("every rank belongs to one virtual worker: name each of 0..{} once, or launch {} "
                            "rank{}", world_size - 1, seen.size(), seen.size() == 1 ? "" : "s"));
  return vws;
}

bool trains_virtual_workers(const HeteroConfig& h) {
  return h.sync == "wsp" || (h.sync == "allreduce" && (!h.virtual_workers.empty() || h.nm > 1));
}

int virtual_worker_of(const std::vector<std::vector<int>>& vws, int rank) {
  for (size_t k = 0; k < vws.size(); ++k)
    for (int r : vws[k])
      if (r == rank) return static_cast<int>(k);
  BATON_ASSERT(false, "rank {} is in no virtual worker", rank);
  return -1;
}

}  // namespace baton
