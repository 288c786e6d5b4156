// Image batch sources; see image_batches.h.
#include "train/loop/image_batches.h"

#include <cmath>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>

#include "core/error.h"
#include "data/idx_images.h"
#include "data/image_folder.h"
#include "data/image_loader.h"
#include "data/synthetic_images.h"

namespace baton {
namespace {

void shape(HostBatch& out, int n, size_t sample_floats) {
  out.B = n;
  out.T = 1;
  out.images.resize(size_t(n) * sample_floats);
  out.targets.resize(size_t(n));
  out.tokens.clear();
}

class DatasetImages final : public BatchSource {
 public:
  explicit DatasetImages(const Config& cfg)
      : cfg_(cfg), train_images_(IdxImages::open(cfg.data.train)), train_labels_(IdxLabels::open(cfg.data.train_labels)) {
    const ModelConfig& m = cfg.model;
    check_images_match_model(train_images_, train_labels_, m.image_size, m.in_channels, m.classes);
    ImageLoaderOptions o{.augment = parse_augment(cfg.data.augment)};
    if (cfg.data.normalize) o.normalize = ChannelStats::of(train_images_);
    stats_ = o.normalize;
    train_ = std::make_unique<ImageLoader>(train_images_, train_labels_, cfg.train.global_batch, cfg.train.seed, o);
    if (cfg.data.valid.empty()) return;
    valid_images_ = IdxImages::open(cfg.data.valid);
    valid_labels_ = IdxLabels::open(cfg.data.valid_labels);
    check_images_match_model(*valid_images_, *valid_labels_, m.image_size, m.in_channels, m.classes);
    valid_ = std::make_unique<ImageLoader>(*valid_images_, *valid_labels_, cfg.train.global_batch, cfg.train.seed,
                                           ImageLoaderOptions{.normalize = stats_});
  }
  void train_rows(int64_t step, int row, int n, HostBatch& out) const override {
    shape(out, n, train_->sample_floats());
    train_->train_rows(step, row, n, out.images.data(), out.targets.data());
  }
  bool has_valid() const override { return valid_ != nullptr; }
  int64_t valid_samples() const override { return valid_images_ ? valid_images_->count() : 0; }
  void valid_rows(int batch, int rows, int row, int n, HostBatch& out) const override {
    shape(out, n, valid_->sample_floats());
    valid_->eval_rows(batch, rows, row, n, out.images.data(), out.targets.data());
  }
  std::string describe() const override {
    std::string s = fmt::format("train {} ({} images {}×{}×{}, epoch {} steps)", cfg_.data.train,
                                train_images_.count(), train_images_.height(), train_images_.width(),
                                train_images_.channels(),
                                (train_images_.count() + cfg_.train.global_batch - 1) / cfg_.train.global_batch);
    s += valid_ ? fmt::format(", valid {} ({} images)", cfg_.data.valid, valid_images_->count())
                : std::string(", no validation set");
    if (stats_) s += fmt::format(", normalised (mean {:.3f}, std {:.3f})", fmt::join(stats_->mean, "/"),
                                 fmt::join(stats_->std, "/"));
    if (cfg_.data.augment != "none") s += ", augment " + cfg_.data.augment;
    return s;
  }
  std::string baseline() const override {
    return fmt::format("uniform guessing over {} classes: loss ln {} = {:.3f}, top-1 {:.1f}%", cfg_.model.classes,
                       cfg_.model.classes, std::log(double(cfg_.model.classes)), 100.0 / cfg_.model.classes);
  }

 private:
  const Config cfg_;  // a copy: a data source outlives the config it was built from
  IdxImages train_images_;
  IdxLabels train_labels_;
  std::optional<IdxImages> valid_images_;
  std::optional<IdxLabels> valid_labels_;
  std::optional<ChannelStats> stats_;
  std::unique_ptr<ImageLoader> train_, valid_;
};

// data.format = "image_folder": JPEG folders through ImageFolderSource. Decoding costs far more
// than an IDX copy, so each training request also starts the same rows of the next step on a
// worker thread (rows are pure functions of (step, row): a prefetched batch is the batch); the
// decode itself runs on the OpenMP threads (ImageSource::costly_samples).
class FolderImages final : public BatchSource {
 public:
  explicit FolderImages(const Config& cfg) : cfg_(cfg), train_index_(ImageFolderIndex::scan(cfg.data.train)) {
    const ModelConfig& m = cfg.model;
    check_classes(train_index_, m.classes);
    ImageFolderOptions o{.channels = m.in_channels, .size = m.image_size, .eval_resize = cfg.data.eval_resize,
                         .augment = parse_augment(cfg.data.augment) == Augment::CROP_FLIP, .mean = cfg.data.mean,
                         .std = cfg.data.std};
    train_ = std::make_unique<ImageFolderSource>(train_index_, cfg.train.global_batch, cfg.train.seed, o);
    rate_ = decode_rate(*train_, 256);
    if (cfg.data.valid.empty()) return;
    valid_index_ = ImageFolderIndex::scan(cfg.data.valid);
    if (valid_index_->classes != train_index_.classes)
      throw Error(fmt::format("{} has the classes {} but {} has {}: class ids would differ", cfg.data.valid,
                              fmt::join(valid_index_->classes, ","), cfg.data.train,
                              fmt::join(train_index_.classes, ",")),
                  "give the validation folder the training folder's class sub-folders");
    o.augment = false;
    valid_ = std::make_unique<ImageFolderSource>(*valid_index_, cfg.train.global_batch, cfg.train.seed, o);
  }
  ~FolderImages() override {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.clear();  // waits for running prefetches (std::async futures block until done)
  }
  void train_rows(int64_t step, int row, int n, HostBatch& out) const override {
    const Key key{step, row, n};
    std::shared_future<HostBatch> ready;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = pending_.find(key); it != pending_.end()) {
        ready = it->second;
        pending_.erase(it);
      }
      std::erase_if(pending_, [&](const auto& kv) { return std::get<0>(kv.first) < step; });
      const Key next{step + 1, row, n};
      if (pending_.size() < kMaxPending && !pending_.contains(next))
        pending_.emplace(next, std::async(std::launch::async, [this, step, row, n] {
                                 HostBatch b;
                                 fill(step + 1, row, n, b);
                                 return b;
                               }).share());
    }
    if (ready.valid()) {
      const HostBatch& b = ready.get();
      out.B = b.B;
      out.T = b.T;
      out.images = b.images;
      out.targets = b.targets;
      out.tokens.clear();
      return;
    }
    fill(step, row, n, out);
  }
  bool has_valid() const override { return valid_ != nullptr; }
  int64_t valid_samples() const override { return valid_ ? valid_->size() : 0; }
  void valid_rows(int batch, int rows, int row, int n, HostBatch& out) const override {
    shape(out, n, valid_->sample_floats());
    valid_->eval_rows(batch, rows, row, n, out.images.data(), out.targets.data());
  }
  std::string describe() const override {
    std::string s = fmt::format("image folder {} ({} JPEGs, {} classes, epoch {} steps)", cfg_.data.train,
                                train_->size(), train_index_.classes.size(),
                                (train_->size() + cfg_.train.global_batch - 1) / cfg_.train.global_batch);
    s += valid_ ? fmt::format(", valid {} ({} JPEGs)", cfg_.data.valid, valid_->size())
                : std::string(", no validation set");
    if (!cfg_.data.mean.empty())
      s += fmt::format(", normalised (mean {}, std {})", fmt::join(cfg_.data.mean, "/"), fmt::join(cfg_.data.std, "/"));
    s += cfg_.data.augment == "crop_flip" ? ", augment RandomResizedCrop + flip" : "";
    s += fmt::format(", decode {:.0f} images/s per core", rate_);
    return s;
  }
  std::string baseline() const override {
    return fmt::format("uniform guessing over {} classes: loss ln {} = {:.3f}, top-1 {:.1f}%", cfg_.model.classes,
                       cfg_.model.classes, std::log(double(cfg_.model.classes)), 100.0 / cfg_.model.classes);
  }

 private:
  using Key = std::tuple<int64_t, int, int>;
  static constexpr size_t kMaxPending = 64;
  static void check_classes(const ImageFolderIndex& index, int classes) {
    if (static_cast<int>(index.classes.size()) > classes)
      throw Error(fmt::format("{} has {} class folders but model.classes is {}", index.root, index.classes.size(),
                              classes),
                  fmt::format("set model.classes = {} (or more)", index.classes.size()));
  }
  void fill(int64_t step, int row, int n, HostBatch& out) const {
    shape(out, n, train_->sample_floats());
    train_->train_rows(step, row, n, out.images.data(), out.targets.data());
  }
  const Config cfg_;
  ImageFolderIndex train_index_;
  std::optional<ImageFolderIndex> valid_index_;
  std::unique_ptr<ImageFolderSource> train_, valid_;
  double rate_ = 0;
  mutable std::mutex mu_;
  mutable std::map<Key, std::shared_future<HostBatch>> pending_;  // last: destroyed (joined) first
};

class RandomImages final : public BatchSource {
 public:
  explicit RandomImages(const Config& cfg)
      : m_(cfg.model), images_(m_.in_channels, m_.image_size, m_.image_size, m_.classes, cfg.train.seed) {}
  void train_rows(int64_t step, int row, int n, HostBatch& out) const override {
    shape(out, n, images_.sample_floats());
    images_.train_rows(step, row, n, out.images.data(), out.targets.data());
  }
  std::string describe() const override {
    return fmt::format("synthetic images {}×{}×{}, {} classes (random: nothing to learn, no validation)",
                       m_.image_size,
                       m_.image_size, m_.in_channels, m_.classes);
  }

 private:
  ModelConfig m_;
  SyntheticImages images_;
};

}  // namespace

std::unique_ptr<BatchSource> make_image_batches(const Config& cfg) {
  if (cfg.data.synthetic) return std::make_unique<RandomImages>(cfg);
  if (cfg.data.format == "image_folder") {
    BATON_REQUIRE(!cfg.data.train.empty(), "data.train is not set",
                  "data.format = \"image_folder\": set data.train to a folder root/<class>/*.jpg");
    return std::make_unique<FolderImages>(cfg);
  }
  BATON_REQUIRE(!cfg.data.train.empty(), "data.train is not set",
                "set data.train and data.train_labels to IDX files (e.g. Debian's dataset-fashion-mnist: "
                "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz), or data.synthetic = true");
  return std::make_unique<DatasetImages>(cfg);
}

}  // namespace baton
