// JPEG image folders (data.format = "image_folder"), torchvision's ImageFolder layout: root/<class>/
// *.jpg | *.jpeg (any case). Classes are the sub-folder names in sorted (byte) order, indexed
// 0, 1, ...; the images of a class are its files in sorted order, the dataset lists class 0's
// first — exactly torchvision's ImageFolder. Only JPEG files are read (other files are skipped);
// files are decoded with libjpeg-turbo (ISLOW DCT, fancy upsampling: PIL's settings, so decoded
// pixels equal PIL's) on every sample request, as RGB when model.in_channels = 3 (grey JPEGs
// replicated, as PIL's convert("RGB")) or as one grey channel when in_channels = 1 (colour JPEGs
// reduced by libjpeg's own colour conversion, Y of YCbCr).
//
// Transforms (torchvision's defaults, resampling PIL's antialiased bilinear filter in PIL's fixed
// point arithmetic, so tensors match torchvision's to float rounding):
// - validation (and training with augment "none"): Resize(R) — shorter side to R, the other
//   int(R·long/short) — then CenterCrop(S), S = model.image_size, R = data.eval_resize or
//   round(S·256/224);
// - training with augment "crop_flip": RandomResizedCrop(S, scale (0.08, 1), ratio (3/4, 4/3)) with
//   torchvision's procedure (10 tries, then the centre-crop fallback), then a horizontal flip with
//   probability 1/2; every draw from mix(seed, epoch, item), so a sample is the same under any
//   layout, rank or thread (not the same numbers as torchvision's random stream).
// Then ToTensor (x/255) and Normalize(mean, std) in float32, as torchvision.
//
// The training stream and its per-epoch shuffle are ImageLoader's (data/image_loader.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/image_source.h"

namespace baton {

// The sorted listing of one ImageFolder root.
struct ImageFolderIndex {
  std::string root;
  std::vector<std::string> classes;  // sorted sub-folder names
  std::vector<std::string> files;    // full paths, class by class, sorted within a class
  std::vector<int32_t> labels;       // class index of each file
  // Throws baton::Error: not a directory, no class folders, no JPEG files.
  static ImageFolderIndex scan(const std::string& root);
};

// A decoded 8-bit image, rows of width × channels bytes (channels last).
struct Image8 {
  int width = 0, height = 0, channels = 0;
  std::vector<uint8_t> pixels;
  const uint8_t* row(int y) const { return pixels.data() + static_cast<size_t>(y) * width * channels; }
};

// Decodes a JPEG file to `channels` (1 grey, 3 RGB); throws baton::Error naming the file.
Image8 decode_jpeg(const std::string& path, int channels);

// PIL's Image.resize((out_w, out_h), BILINEAR) on an 8-bit image: the bilinear filter widened by
// the downscale factor (antialiasing), in PIL's 22-bit fixed point, horizontal pass first.
Image8 resize_bilinear(const Image8& in, int out_w, int out_h);

// One RandomResizedCrop draw: the crop (top, left, height, width) in an image of `height` × `width`
// pixels and the flip flag.
struct ResizedCrop {
  int top = 0, left = 0, height = 0, width = 0;
  bool flip = false;
};
ResizedCrop random_resized_crop_draw(uint64_t seed, int64_t epoch, int64_t item, int height, int width);

struct ImageFolderOptions {
  int channels = 3;         // 1 or 3
  int size = 224;           // model.image_size: the output is size × size
  int eval_resize = 0;      // 0: round(size · 256 / 224)
  bool augment = false;     // training rows: RandomResizedCrop + flip
  std::vector<double> mean, std;  // empty: x/255
};

class ImageFolderSource final : public ImageSource {
 public:
  // Keeps a reference: `index` must outlive the source.
  ImageFolderSource(const ImageFolderIndex& index, int global_batch, uint64_t seed, ImageFolderOptions options);

  int channels() const override { return options_.channels; }
  int height() const override { return options_.size; }
  int width() const override { return options_.size; }
  int64_t size() const { return static_cast<int64_t>(index_.files.size()); }
  int64_t stream_item(int64_t i) const;
  // The validation transform of item `item` ([C, S, S] floats).
  void write_eval(int64_t item, float* out) const;

 private:
  void train_sample(int64_t step, int row, float* image, int32_t* label) const override;
  void eval_sample(int64_t index, float* image, int32_t* label) const override;
  int64_t train_batch_rows() const override { return global_batch_; }
  bool costly_samples() const override { return true; }  // a JPEG decode each
  void to_floats(const Image8& img, bool flip, float* out) const;

  const ImageFolderIndex& index_;
  int global_batch_;
  uint64_t seed_;
  ImageFolderOptions options_;
};

// Images/s one core decodes and transforms (validation transform) over up to `max_images` files of
// the index (at most ~0.25 s of work).
double decode_rate(const ImageFolderSource& source, int64_t max_images);

}  // namespace baton
