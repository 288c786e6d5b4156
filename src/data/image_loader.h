// Training and validation batches from an IDX image dataset (images + labels, data/idx_images.h).
//
// Training: the global batch of step s is samples [s·G, (s+1)·G) of an endless stream (G the
// global batch). Sample i of the stream is item π_e(i mod N) of the dataset, where e = ⌊i / N⌋ is
// its epoch and π_e the permutation of [0, N) keyed by (seed, e) (data/permutation.h): every item
// once per epoch, a fresh order each epoch, and any sample computable on its own. With crop_flip
// augmentation the sample is also padded by 4 zero pixels per side, cropped back to H×W at an
// offset (dy, dx) ∈ [0, 8]² and mirrored left-right with probability 1/2, all drawn from
// (seed, e, item) — the same item gets a new crop every epoch, the same crop in every run.
//
// Validation: batch b of R rows is items [b·R, (b+1)·R) mod N, in order, never augmented.
//
// Pixels x ∈ [0, 255] become x/255, or (x/255 − mean_c)/std_c with per-channel statistics of the
// *training* images (ChannelStats::of), passed in so that validation uses the training statistics.
// Images come out NCHW whatever the file's layout (IDX stores channels last). Every method is
// const and keeps no scratch state; batch assembly is ImageSource's.
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "data/idx_images.h"
#include "data/image_source.h"

namespace baton {

enum class Augment : uint8_t { NONE, CROP_FLIP };

// "none" | "crop_flip" (data.augment); anything else is a baton::Error.
Augment parse_augment(std::string_view name);

// Per-channel mean and (population) standard deviation of the pixel values x/255.
struct ChannelStats {
  std::vector<double> mean, std;
  // Over every pixel of `images`, from exact per-channel histograms, so the result is the same for
  // any thread count. Throws baton::Error when there are no images.
  static ChannelStats of(const IdxImages& images);
};

// One augmentation draw: the crop's top-left corner in the padded image and the mirror flag.
struct CropFlip {
  int dy = 0, dx = 0;
  bool flip = false;
};
inline constexpr int kCropPad = 4;                             // zero pixels added on each side
inline constexpr CropFlip kNoCrop{kCropPad, kCropPad, false};  // the original image

// The crop_flip draw of dataset item `item` in epoch `epoch`: dy, dx uniform in [0, 2·kCropPad],
// flip with probability 1/2.
CropFlip crop_flip_draw(uint64_t seed, int64_t epoch, int64_t item);

struct ImageLoaderOptions {
  std::optional<ChannelStats> normalize;  // statistics to normalise with; none: x/255
  Augment augment = Augment::NONE;        // training rows only
};

class ImageLoader final : public ImageSource {
 public:
  // Keeps references: images and labels must outlive the loader. Throws baton::Error when the
  // counts differ, the dataset is empty, or the statistics do not fit (wrong channel count, a
  // channel with standard deviation 0).
  ImageLoader(const IdxImages& images, const IdxLabels& labels, int global_batch, uint64_t seed,
              ImageLoaderOptions options = {});

  int channels() const override { return images_.channels(); }
  int height() const override { return images_.height(); }
  int width() const override { return images_.width(); }
  int64_t size() const { return images_.count(); }
  // The dataset item that is sample i of the training stream: π_e(i mod N), e = ⌊i / N⌋.
  int64_t stream_item(int64_t i) const;

 private:
  void train_sample(int64_t step, int row, float* image, int32_t* label) const override;
  void eval_sample(int64_t index, float* image, int32_t* label) const override;
  int64_t train_batch_rows() const override { return global_batch_; }
  // Writes dataset item `item`, cropped and flipped as `crop` says, as [C, H, W] floats.
  void write_item(int64_t item, CropFlip crop, float* out) const;

  const IdxImages& images_;
  const IdxLabels& labels_;
  int global_batch_;
  uint64_t seed_;
  Augment augment_;
  std::vector<float> lut_;  // [C, 256]: the float of each pixel value in each channel
};

// Throws baton::Error when the dataset does not fit the model: images not image_size × image_size,
// not in_channels channels, or a label >= classes. Each message says what the data has.
void check_images_match_model(const IdxImages& images, const IdxLabels& labels, int image_size,
                              int in_channels, int classes);

}  // namespace baton
