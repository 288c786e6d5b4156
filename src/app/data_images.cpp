// `baton data images CONFIG [--set k=v]... --out FILE [--split valid|train] [--batch B] [--rows R]`:
// writes the tensors a CNN's data source gives for one batch, exactly as the trainer receives
// them — FILE holds float32 images [R, C, H, W] (little-endian, row-major, no header) and
// FILE.labels int32 labels [R] — and prints the shape. For checking a dataset and its transforms
// against another pipeline (tests/e2e/test_image_folder.sh compares torchvision's ImageFolder).
// Training batch B is the one of step B; validation batch B is samples [B·R, (B+1)·R).
#include <fstream>

#include "app/app.h"
#include "config/config.h"
#include "core/error.h"
#include "core/log.h"
#include "train/loop/image_batches.h"

namespace baton::app {

int run_data_images(const DataImagesOptions& opts) {
  const Config cfg = load_config(opts.config, opts.overrides);
  BATON_REQUIRE(cfg.model.kind != ModelKind::GPT, "baton data images reads an image model's dataset",
                "give a CNN config (model.kind = \"resnet\" or \"vgg\")");
  BATON_REQUIRE(opts.split == "valid" || opts.split == "train",
                fmt::format("--split {} is not valid or train", opts.split), "use --split valid or --split train");
  const std::unique_ptr<BatchSource> data = make_image_batches(cfg);
  const int rows = opts.rows > 0 ? opts.rows : cfg.train.global_batch;
  HostBatch b;
  if (opts.split == "valid") {
    BATON_REQUIRE(data->has_valid(), fmt::format("{} has no validation set (data.valid)", opts.config),
                  "set data.valid, or use --split train");
    data->valid_rows(static_cast<int>(opts.batch), rows, 0, rows, b);
  } else {
    BATON_REQUIRE(rows <= cfg.train.global_batch,
                  fmt::format("--rows {} exceeds train.global_batch = {}", rows, cfg.train.global_batch),
                  "a training batch has train.global_batch rows");
    data->train_rows(opts.batch, 0, rows, b);
  }
  std::ofstream img(opts.out, std::ios::binary), lab(opts.out + ".labels", std::ios::binary);
  BATON_REQUIRE(img.write(reinterpret_cast<const char*>(b.images.data()),
                          static_cast<std::streamsize>(b.images.size() * sizeof(float))) &&
                    lab.write(reinterpret_cast<const char*>(b.targets.data()),
                              static_cast<std::streamsize>(b.targets.size() * sizeof(int32_t))),
                fmt::format("cannot write {}", opts.out), "check that the directory exists and is writable");
  log::info("data: {}", data->describe());
  log::info("wrote {} {} batch {}: {} images × {} floats (float32) and {}.labels (int32)", opts.out, opts.split,
            opts.batch, rows, rows > 0 ? b.images.size() / size_t(rows) : 0, opts.out);
  return 0;
}

}  // namespace baton::app
