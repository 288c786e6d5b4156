// ImageLoader (see image_loader.h): the sample stream, the augmentation draw, normalisation
// statistics and the model checks. Every sample is computed from (seed, its stream index) alone,
// so rows can be written in any order by any thread.
#include "data/image_loader.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/rng.h"
#include "data/permutation.h"

namespace baton {
namespace {

// Stream tags keep the shuffle and the augmentation draws independent of each other.
const uint64_t kShuffleTag = hash_string("baton image shuffle");
const uint64_t kCropFlipTag = hash_string("baton image crop_flip");

// Uniform integer in [0, n) from 32 random bits (multiply-shift).
int below(uint64_t bits32, int n) { return static_cast<int>((bits32 * uint64_t(n)) >> 32); }

// [C, 256] table of each channel's float for each pixel value, computed in double.
std::vector<float> pixel_table(int channels, const std::optional<ChannelStats>& stats) {
  std::vector<float> lut(static_cast<size_t>(channels) * 256);
  for (int c = 0; c < channels; ++c)
    for (int v = 0; v < 256; ++v) {
      const double x = v / 255.0;
      lut[c * 256 + v] = static_cast<float>(stats ? (x - stats->mean[c]) / stats->std[c] : x);
    }
  return lut;
}

void check_stats(const ChannelStats& stats, const IdxImages& images) {
  if (stats.mean.size() != static_cast<size_t>(images.channels()) ||
      stats.std.size() != stats.mean.size())
    throw Error(
        fmt::format("normalisation statistics for {} channels, but {} has {}-channel images",
                    stats.mean.size(), images.path(), images.channels()),
        "the training and validation images must have the same number of channels");
  for (size_t c = 0; c < stats.std.size(); ++c)
    if (!(stats.std[c] > 0))
      throw Error(fmt::format("channel {} of the training images has standard deviation {} (every "
                              "pixel the same): it cannot be normalised",
                              c, stats.std[c]),
                  "set data.normalize = false");
}

}  // namespace

Augment parse_augment(std::string_view name) {
  if (name == "none") return Augment::NONE;
  if (name == "crop_flip") return Augment::CROP_FLIP;
  throw Error(fmt::format("unknown image augmentation '{}'", name),
              "data.augment is \"none\" or \"crop_flip\"");
}

ChannelStats ChannelStats::of(const IdxImages& images) {
  if (images.count() == 0)
    throw Error(fmt::format("{} holds no images", images.path()),
                "data.train must name a non-empty IDX image file");
  const int C = images.channels();
  const size_t pixels = images.image_bytes() / static_cast<size_t>(C);
  // Integer histograms are exact, so summing the threads' parts in any order gives the same counts.
  std::vector<int64_t> counts(static_cast<size_t>(C) * 256, 0);
#pragma omp parallel
  {
    std::vector<int64_t> local(counts.size(), 0);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < images.count(); ++i) {
      const uint8_t* img = images.image(i);
      for (size_t p = 0; p < pixels; ++p)
        for (int c = 0; c < C; ++c) ++local[c * 256 + img[p * C + c]];
    }
#pragma omp critical
    for (size_t k = 0; k < counts.size(); ++k) counts[k] += local[k];
  }
  ChannelStats stats;
  const double total = static_cast<double>(pixels) * static_cast<double>(images.count());
  for (int c = 0; c < C; ++c) {
    const int64_t* h = &counts[c * 256];
    double sum = 0;
    for (int v = 0; v < 256; ++v) sum += static_cast<double>(h[v]) * (v / 255.0);
    const double mean = sum / total;
    double squares = 0;
    for (int v = 0; v < 256; ++v) {
      const double d = v / 255.0 - mean;
      squares += static_cast<double>(h[v]) * d * d;
    }
    stats.mean.push_back(mean);
    stats.std.push_back(std::sqrt(squares / total));
  }
  return stats;
}

CropFlip crop_flip_draw(uint64_t seed, int64_t epoch, int64_t item) {
  const uint64_t h =
      mix({seed, kCropFlipTag, static_cast<uint64_t>(epoch), static_cast<uint64_t>(item)});
  const int offsets = 2 * kCropPad + 1;
  const int corner = below(h & 0xffffffff, offsets * offsets);  // (dy, dx) jointly uniform
  return CropFlip{.dy = corner / offsets, .dx = corner % offsets, .flip = (h >> 63) != 0};
}

ImageLoader::ImageLoader(const IdxImages& images, const IdxLabels& labels, int global_batch,
                         uint64_t seed, ImageLoaderOptions options)
    : images_(images),
      labels_(labels),
      global_batch_(global_batch),
      seed_(seed),
      augment_(options.augment) {
  if (images.count() != labels.count())
    throw Error(fmt::format("{} has {} images but {} has {} labels", images.path(), images.count(),
                            labels.path(), labels.count()),
                "data.train_labels must be the labels of data.train, data.valid_labels those of "
                "data.valid (e.g. train-images-idx3-ubyte.gz with train-labels-idx1-ubyte.gz)");
  if (images.count() == 0)
    throw Error(fmt::format("{} holds no images", images.path()), "use a non-empty dataset");
  if (global_batch <= 0)
    throw Error(fmt::format("global batch {} must be positive", global_batch),
                "set train.global_batch to e.g. 128");
  if (options.normalize) check_stats(*options.normalize, images);
  lut_ = pixel_table(images.channels(), options.normalize);
}

int64_t ImageLoader::stream_item(int64_t i) const {
  BATON_ASSERT(i >= 0, "stream index {} is negative", i);
  const int64_t n = size();
  const uint64_t epoch = static_cast<uint64_t>(i / n);
  return Permutation(n, mix({seed_, kShuffleTag, epoch}))(i % n);
}

void ImageLoader::write_item(int64_t item, CropFlip crop, float* out) const {
  const int C = channels(), H = height(), W = width();
  const uint8_t* img = images_.image(item);  // [H, W, C]
  for (int c = 0; c < C; ++c) {
    const float* table = &lut_[c * 256];
    const float pad = table[0];  // padding is pixel value 0, normalised like any pixel
    for (int y = 0; y < H; ++y) {
      float* dst = out + (static_cast<size_t>(c) * H + y) * W;
      const int sy = y + crop.dy - kCropPad;
      if (sy < 0 || sy >= H) {
        std::fill(dst, dst + W, pad);
        continue;
      }
      const uint8_t* src = img + static_cast<size_t>(sy) * W * C + c;
      for (int x = 0; x < W; ++x) {
        // Crop, then mirror the crop: output column x shows crop column W-1-x when flipped.
        const int sx = (crop.flip ? W - 1 - x : x) + crop.dx - kCropPad;
        dst[x] = sx >= 0 && sx < W ? table[src[static_cast<size_t>(sx) * C]] : pad;
      }
    }
  }
}

void ImageLoader::train_sample(int64_t step, int row, float* image, int32_t* label) const {
  const int64_t sample = step * global_batch_ + row;
  const int64_t item = stream_item(sample);
  const CropFlip crop =
      augment_ == Augment::CROP_FLIP ? crop_flip_draw(seed_, sample / size(), item) : kNoCrop;
  write_item(item, crop, image);
  *label = labels_[item];
}

void ImageLoader::eval_sample(int64_t index, float* image, int32_t* label) const {
  const int64_t item = index % size();
  write_item(item, kNoCrop, image);
  *label = labels_[item];
}

void check_images_match_model(const IdxImages& images, const IdxLabels& labels, int image_size,
                              int in_channels, int classes) {
  if (images.height() != image_size || images.width() != image_size)
    throw Error(
        fmt::format("{} has {}×{} images but model.image_size is {}", images.path(),
                    images.height(), images.width(), image_size),
        images.height() == images.width()
            ? fmt::format("set model.image_size = {} (images are not resized)", images.height())
            : std::string("baton's CNNs take square images; crop or pad the dataset"));
  if (images.channels() != in_channels)
    throw Error(fmt::format("{} has {}-channel images but model.in_channels is {}", images.path(),
                            images.channels(), in_channels),
                fmt::format("set model.in_channels = {}", images.channels()));
  if (labels.max_label() >= classes)
    throw Error(fmt::format("{} has label {} but model.classes is {} (labels are class ids "
                            "0..classes-1)",
                            labels.path(), labels.max_label(), classes),
                fmt::format("set model.classes = {} (or more)", labels.max_label() + 1));
}

}  // namespace baton
