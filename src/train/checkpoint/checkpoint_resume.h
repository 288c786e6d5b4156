// Where a training run starts (checkpoint.resume): "never" (from scratch), "auto" (the newest
// complete checkpoint of checkpoint.dir that loads; damaged ones are skipped with a warning) or an
// explicit checkpoint path (any problem is fatal).
#pragma once
#include <functional>
#include <optional>
#include <string>

#include "config/config.h"
#include "train/checkpoint/checkpoint.h"

namespace baton {

struct ResumePoint {
  std::string path;
  CheckpointMeta meta;
};

// `load(path)` reads one candidate completely, verifying it, and throws (CheckpointDamaged for a
// damaged file) without changing the training state. Returns nullopt to start from scratch.
// "auto" with checkpoints present of which none loads is an error, not a silent fresh start; damaged
// files newer than the one chosen are renamed to NAME.damaged.
std::optional<ResumePoint> choose_resume_point(
    const CheckpointConfig& ckpt, const std::string& dir,
    const std::function<CheckpointMeta(const std::string&)>& load);

// Throws Error when `dir` holds complete checkpoints newer than `start_step`: this run's saves
// would be mixed with (and pruned against) another run's. Nothing is deleted or overwritten.
void require_no_newer_checkpoints(const std::string& dir, int64_t start_step);

}  // namespace baton
