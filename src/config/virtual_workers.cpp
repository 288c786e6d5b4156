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
    "write each virtual worker as its pipeline stages in order, each RANK[@DEVICE][:FIRST-END], e.g. "
    "virtual_workers = [\"0\", \"1,2\"] or [\"0@V100:0-7, 1@P100:7-12\"] (or leave it empty: one virtual "
    "worker per rank)";

std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

bool parse_int(std::string_view s, int& out) {
  s = trim(s);
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return !s.empty() && ec == std::errc() && end == s.data() + s.size() && out >= 0;
}

VirtualWorkerStage parse_stage(std::string_view item, const std::string& entry, size_t index) {
  const auto bad = [&](std::string_view why) {
    return Error(fmt::format("hetero.virtual_workers[{}] = \"{}\": {}", index, entry, why), kHint);
  };
  VirtualWorkerStage st;
  item = trim(item);
  if (const size_t colon = item.find(':'); colon != std::string_view::npos) {
    const std::string_view range = item.substr(colon + 1);
    const size_t dash = range.find('-');
    if (dash == std::string_view::npos || !parse_int(range.substr(0, dash), st.layers.first) ||
        !parse_int(range.substr(dash + 1), st.layers.second) || st.layers.second <= st.layers.first)
      throw bad(fmt::format("\"{}\" is not a layer range FIRST-END with FIRST < END", range));
    item = item.substr(0, colon);
  }
  if (const size_t at = item.find('@'); at != std::string_view::npos) {
    st.device = std::string(trim(item.substr(at + 1)));
    if (st.device.empty()) throw bad("an empty device name after '@'");
    item = item.substr(0, at);
  }
  if (!parse_int(item, st.rank)) throw bad(fmt::format("\"{}\" is not a rank", trim(item)));
  return st;
}

VirtualWorker parse_entry(const std::string& entry, size_t index) {
  VirtualWorker vw;
  std::string_view rest = entry;
  while (true) {
    const size_t comma = rest.find(',');
    vw.stages.push_back(parse_stage(rest.substr(0, comma), entry, index));
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  for (const VirtualWorkerStage& st : vw.stages)
    BATON_REQUIRE((st.layers.first >= 0) == vw.explicit_layers(),
                  fmt::format("hetero.virtual_workers[{}] = \"{}\" gives layers for some stages only", index, entry),
                  "give every stage of the virtual worker its layers (RANK:FIRST-END) or none (even split)");
  return vw;
}

}  // namespace

std::vector<int> VirtualWorker::ranks() const {
  std::vector<int> out;
  for (const VirtualWorkerStage& st : stages) out.push_back(st.rank);
  return out;
}

std::vector<std::vector<int>> VirtualWorker::layer_ranges(int num_layers, int index) const {
  if (!explicit_layers()) return {};
  std::vector<std::vector<int>> out;
  int next = 0;
  for (const VirtualWorkerStage& st : stages) {
    BATON_REQUIRE(st.layers.first == next,
                  fmt::format("hetero.virtual_workers[{}]: stage of rank {} starts at layer {}, expected {}", index,
                              st.rank, st.layers.first, next),
                  "a virtual worker's stages cover the model's layers in order, without gaps or overlaps");
    out.push_back({st.layers.first, st.layers.second});
    next = st.layers.second;
  }
  BATON_REQUIRE(next == num_layers,
                fmt::format("hetero.virtual_workers[{}]: the stages end at layer {}, but the model has {} layers",
                            index, next, num_layers),
                fmt::format("the last stage ends at {} (a GPT has n_layer + 2 global layers: embedding, blocks, "
                            "head; `baton plan --algorithm hetpipe` prints a runnable partition)", num_layers));
  return out;
}

std::vector<VirtualWorker> virtual_workers(const HeteroConfig& h, int world_size) {
  std::vector<VirtualWorker> vws;
  if (h.virtual_workers.empty()) {
    for (int r = 0; r < world_size; ++r) vws.push_back({.stages = {{.rank = r}}});
    return vws;
  }
  std::set<int> seen;
  for (size_t i = 0; i < h.virtual_workers.size(); ++i) {
    vws.push_back(parse_entry(h.virtual_workers[i], i));
    for (int r : vws.back().ranks()) {
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
  return h.sync == SyncMode::WSP || (h.sync == SyncMode::ALLREDUCE && (!h.virtual_workers.empty() || h.nm > 1));
}

}  // namespace baton
