#include "train/checkpoint/checkpoint_resume.h"

#include <filesystem>

#include "core/log.h"
#include "train/checkpoint/checkpoint_dir.h"

namespace baton {

std::optional<ResumePoint> choose_resume_point(
    const CheckpointConfig& ckpt, const std::string& dir,
    const std::function<CheckpointMeta(const std::string&)>& load) {
  if (ckpt.resume == "never") return std::nullopt;
  if (ckpt.resume != "auto") {
    const std::string path = resolve_checkpoint(ckpt.resume);
    return ResumePoint{path, load(path)};
  }
  const std::vector<std::string> candidates = checkpoint_candidates(dir);
  std::vector<std::string> damaged;
  for (const std::string& path : candidates) {
    try {
      ResumePoint p{path, load(path)};
      // Newer damaged files are set aside (kept for inspection) so that this run's saves neither
      // mix with them nor count them when pruning.
      for (const std::string& d : damaged) {
        std::filesystem::rename(d, d + ".damaged");
        log::warn("renamed damaged checkpoint '{}' to '{}.damaged'", d, d);
      }
      return p;
    } catch (const CheckpointDamaged& e) {
      log::warn("skipping damaged checkpoint: {}", e.what());
      damaged.push_back(path);
    }
  }
  BATON_REQUIRE(candidates.empty(),
                fmt::format("checkpoint.resume = \"auto\" found {} checkpoint(s) in '{}' and none is "
                            "loadable (see the warnings above)", candidates.size(), dir),
                "move the damaged files away to start from scratch, or set checkpoint.resume to a good file");
  return std::nullopt;
}

void require_no_newer_checkpoints(const std::string& dir, int64_t start_step) {
  const std::vector<CheckpointEntry> all = list_checkpoints(dir);
  BATON_REQUIRE(all.empty() || all.back().step <= start_step,
                fmt::format("checkpoint.dir '{}' already holds {} (step {}), newer than this run's "
                            "start at step {}; refusing to mix runs", dir,
                            all.empty() ? "" : all.back().path, all.empty() ? 0 : all.back().step, start_step),
                "use a new checkpoint.dir (or run.dir), resume = \"auto\", or delete the old checkpoints");
}

}  // namespace baton
