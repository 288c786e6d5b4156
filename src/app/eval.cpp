// `baton eval CONFIG --checkpoint PATH [--set k=v]... [--batches N] [--json FILE]`: the validation
// loss (and a CNN's top-1 / top-5 accuracy) of a checkpoint, for any model kind and any layout the
// config gives (mpirun / srun as for training). The batches are train.global_batch samples of
// data.valid in order; by default as many whole batches as the validation set holds (all of it
// when the batch divides it; the few samples left over are named in the output).
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "app/app.h"
#include "config/config.h"
#include "core/error.h"
#include "core/log.h"
#include "train/checkpoint/checkpoint_dir.h"
#include "train/loop/session.h"
#include "train/loop/trainer.h"

namespace baton::app {
namespace {

int eval(Config cfg, dist::Comm& world, const EvalOptions& opts) {
  BATON_REQUIRE(!cfg.data.valid.empty(), fmt::format("{} has no validation set (data.valid)", opts.config),
                "set data.valid (and data.valid_labels for images), e.g. --set data.valid='\"PATH\"'");
  const std::string path = resolve_checkpoint(opts.checkpoint);
  cfg.checkpoint.every = 0;
  ModelAndData md = model_and_data(cfg);
  TrainSession session(cfg, world, std::move(md.builder), std::move(md.data));
  const CheckpointMeta meta = session.load(path);
  const int rows = cfg.train.global_batch;
  const int64_t samples = session.valid_samples();
  int batches = opts.batches;
  if (batches == 0) {
    BATON_REQUIRE(samples >= rows,
                  fmt::format("the validation set holds {} samples, fewer than one batch of train.global_batch = "
                              "{}", samples, rows),
                  fmt::format("lower train.global_batch (--set train.global_batch={}), keeping it a multiple of "
                              "train.micro_batch × data-parallel groups", samples));
    batches = static_cast<int>(samples / rows);
  }
  const std::optional<EvalResult> r = session.evaluate(batches);
  BATON_ASSERT(r.has_value(), "validation data vanished");
  const bool images = session.builder().input_kind() == InputKind::IMAGES;
  const int64_t seen = int64_t(batches) * rows;
  std::string coverage = fmt::format("{} {} in {} batches of {}", seen, images ? "images" : "sequences", batches, rows);
  if (samples > 0 && seen < samples)
    coverage += opts.batches > 0 ? fmt::format(" ({} of {})", seen, samples)
                                 : fmt::format(" ({} of {}: the last {} do not fill a batch)", seen, samples,
                                               samples - seen);
  else if (samples > 0 && seen > samples)
    coverage += fmt::format(" (the {} samples wrap around)", samples);
  std::string metrics;
  const std::vector<std::string> names = session.builder().metric_names();
  for (size_t i = 0; i < names.size(); ++i) metrics += fmt::format(" | {} {:.2f}%", names[i], 100 * r->metrics[i]);
  log::info("eval: {} (step {}) | {} | loss {:.4f}{}", std::filesystem::path(path).filename().string(), meta.step,
            coverage, r->loss, metrics);
  if (!opts.json.empty() && world.rank() == 0) {
    nlohmann::json j = {{"checkpoint", path}, {"step", meta.step}, {"batches", batches},
                        {"samples", seen}, {"loss", r->loss}};
    for (size_t i = 0; i < names.size(); ++i) j[names[i]] = r->metrics[i];
    std::ofstream out(opts.json);
    BATON_REQUIRE(out << j.dump(2) << "\n", fmt::format("cannot write {}", opts.json),
                  "check that the directory exists and is writable");
  }
  return 0;
}

}  // namespace

int run_eval(const EvalOptions& opts) {
  BATON_REQUIRE(opts.batches >= 0, fmt::format("--batches {} must be >= 0", opts.batches),
                "0 (the default) evaluates the whole validation set");
  return run_with_config(opts.config, opts.overrides, false,
                         [&](const Config& cfg, dist::Comm& world) { return eval(cfg, world, opts); });
}

}  // namespace baton::app
