// What an image model's trainer takes its samples from: rows of the training batch of a step and
// of validation batches, as float images [n, C, H, W] (NCHW) and int32 class labels [n]. Every row
// is a pure function of its indices (the seed fixed at construction), so data-parallel ranks,
// pipeline stages and resumed runs that ask for the same row get the same sample; implementations
// keep no mutable state, so concurrent callers are safe. Implementations: ImageLoader (IDX
// datasets), ImageFolderSource (JPEG folders), SyntheticImages (random ImageNet-shaped data for
// bench/profile).
//
// The base class owns batch assembly — request checks, the validation tiling (validation batch b
// of R rows is validation samples [b·R, (b+1)·R)) and the threads — and implementations write one
// sample at a time.
#pragma once
#include <cstddef>
#include <cstdint>

namespace baton {

class ImageSource {
 public:
  virtual ~ImageSource() = default;
  virtual int channels() const = 0;
  virtual int height() const = 0;
  virtual int width() const = 0;
  // Floats of one sample: C × H × W.
  size_t sample_floats() const {
    return static_cast<size_t>(channels()) * static_cast<size_t>(height()) *
           static_cast<size_t>(width());
  }
  // Rows [row, row + n) of the global training batch of `step`.
  void train_rows(int64_t step, int row, int n, float* images, int32_t* labels) const;
  // Rows [row, row + n) of validation batch `batch` (0-based), batches of `batch_rows` rows.
  void eval_rows(int64_t batch, int batch_rows, int row, int n, float* images,
                 int32_t* labels) const;

 protected:
  // Row `row` of the training batch of `step`: image [C, H, W] and label.
  virtual void train_sample(int64_t step, int row, float* image, int32_t* label) const = 0;
  // Validation sample `index` (0-based, any index >= 0).
  virtual void eval_sample(int64_t index, float* image, int32_t* label) const = 0;
  // Rows a training batch has: requests beyond them are bugs (checked before any thread starts).
  virtual int64_t train_batch_rows() const = 0;
  // True when one sample costs far more than writing its floats (a JPEG decode): batches are then
  // always assembled on threads.
  virtual bool costly_samples() const { return false; }
};

}  // namespace baton
