// WSP checkpoints and (elastic) resume; see wsp_checkpoint.h.
#include "train/hetero/wsp_checkpoint.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "config/virtual_workers.h"
#include "core/error.h"
#include "core/log.h"
#include "train/checkpoint/checkpoint_dir.h"

namespace baton {
namespace {

namespace fs = std::filesystem;

std::string marker_name(int64_t step) { return fmt::format("wsp-{:07d}.json", step); }

// The markers in `dir`, newest first: (step, path).
std::vector<std::pair<int64_t, std::string>> markers(const std::string& dir) {
  static const std::regex pattern(R"(wsp-(\d+)\.json)");
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (std::regex_match(name, m, pattern)) out.emplace_back(std::stoll(m[1].str()), e.path().string());
  }
  std::sort(out.rbegin(), out.rend());
  return out;
}

}  // namespace

std::vector<std::string> resolved_virtual_workers(const Config& cfg, int world_size) {
  if (!cfg.hetero.virtual_workers.empty()) return cfg.hetero.virtual_workers;
  std::vector<std::string> out;
  for (int r = 0; r < world_size; ++r) out.push_back(std::to_string(r));
  return out;
}

void publish_wsp_checkpoint(const Config& cfg, int world_size, int64_t step) {
  const std::string dir = cfg.checkpoint_dir();
  const nlohmann::json j = {{"step", step},
                            {"virtual_workers", resolved_virtual_workers(cfg, world_size)},
                            {"nm", cfg.hetero.nm},
                            {"staleness", cfg.hetero.staleness}};
  write_durably(dir, marker_name(step), j.dump() + "\n");
  const auto all = markers(dir);
  for (size_t i = static_cast<size_t>(std::max(cfg.checkpoint.keep, 1)); i < all.size(); ++i) {
    std::error_code ec;
    fs::remove(all[i].second, ec);
  }
}

void log_wsp_resume(const WspResume& r, int num_vw, const char* sync) {
  if (r.elastic)
    log::info("elastic resume at step {}: {} virtual workers now, {} in the checkpoint; every VW continues from "
              "the global weights (and VW 0's optimizer state) of {}", r.step, num_vw, r.old_vws, r.path);
  else
    log::info("resumed {} at step {} (every VW from its own checkpoint, weights = w_global)", sync, r.step);
}

std::optional<WspResume> find_wsp_resume(const Config& cfg, dist::Comm& world, int vw) {
  const std::string& mode = cfg.checkpoint.resume;
  std::optional<WspResume> found;
  if (mode != "never") {
    const std::string dir = mode == "auto" ? cfg.checkpoint_dir() : mode;
    BATON_REQUIRE(mode == "auto" || fs::is_directory(dir),
                  fmt::format("checkpoint.resume = \"{}\": a WSP run resumes from a checkpoint directory (its "
                              "wsp-NNNNNNN.json markers and vw<k>/ files)", mode),
                  "give the checkpoint.dir of the run to resume, or \"auto\"");
    const std::vector<std::string> now = resolved_virtual_workers(cfg, world.size());
    for (const auto& [step, path] : markers(dir)) {
      std::ifstream in(path);
      const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
      if (j.is_discarded() || !j.contains("virtual_workers") || !j.contains("step")) {
        log::warn("skipping {}: not a WSP checkpoint marker", path);
        continue;
      }
      const auto was = j["virtual_workers"].get<std::vector<std::string>>();
      // Every VW's file of that step must exist (a marker is written after all of them).
      bool complete = true;
      for (size_t k = 0; k < was.size(); ++k)
        complete = complete && fs::exists(fmt::format("{}/vw{}/{}", dir, k, checkpoint_file_name(step)));
      if (!complete) {
        log::warn("skipping WSP checkpoint of step {}: a virtual worker's file is missing", step);
        continue;
      }
      const bool elastic = was != now;
      found = WspResume{.step = step,
                        .path = fmt::format("{}/vw{}/{}", dir, elastic ? 0 : vw, checkpoint_file_name(step)),
                        .elastic = elastic,
                        .old_vws = static_cast<int>(was.size())};
      break;
    }
  }
  // Every rank resumes from the same step (a rank on another file system could see another).
  double steps[2] = {found ? double(found->step) : -1.0, found ? -double(found->step) : 1.0};
  world.all_reduce(steps, 2, DType::F64, dist::ReduceOp::MAX);
  BATON_REQUIRE(steps[0] == -steps[1],
                fmt::format("the ranks see different WSP checkpoints (steps {} and {})", -steps[1], steps[0]),
                "put checkpoint.dir on a file system every rank shares, or resume = \"never\"");
  return found;
}

}  // namespace baton
