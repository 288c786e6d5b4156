// Random images and labels of any shape (ImageNet's 3×224×224 and 1000 classes by default in the
// config) for `baton bench` and `baton profile`: no dataset needed, same interface as ImageLoader.
// Sample (seed, step, row) is a pure function of those three numbers: its label is uniform in
// [0, classes) and its values are approximately N(0, 1) — each the Irwin–Hall sum of four 16-bit
// uniforms, shifted and scaled to mean 0 and variance 1 exactly (bounded by ±2√3). That costs one
// 64-bit random number per value, where Box–Muller's logarithm and cosine would make a 128-image
// ImageNet batch (19M values) slow enough to show up in benchmark step times.
// Validation batches are another stream of the same kind (batch b, row r ↔ sample b·R + r).
#pragma once
#include <cstdint>

#include "data/image_source.h"

namespace baton {

class SyntheticImages final : public ImageSource {
 public:
  // Throws baton::Error unless every size is positive (and classes >= 1).
  SyntheticImages(int channels, int height, int width, int classes, uint64_t seed);

  int channels() const override { return channels_; }
  int height() const override { return height_; }
  int width() const override { return width_; }
  int classes() const { return classes_; }

 private:
  void train_sample(int64_t step, int row, float* image, int32_t* label) const override;
  void eval_sample(int64_t index, float* image, int32_t* label) const override;
  // Any row of any step is a sample: the global batch is the caller's business.
  int64_t train_batch_rows() const override { return INT32_MAX; }
  // Writes the sample whose random stream is keyed by `key`.
  void write_sample(uint64_t key, float* image, int32_t* label) const;
  int channels_, height_, width_, classes_;
  uint64_t seed_;
};

}  // namespace baton
