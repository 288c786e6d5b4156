// SyntheticImages (see synthetic_images.h): one xoshiro stream per sample, keyed by
// mix(seed, stream tag, index...), so rows are independent and any slicing gives the same data.
#include "data/synthetic_images.h"

#include <cmath>

#include "core/error.h"
#include "core/rng.h"

namespace baton {
namespace {

const uint64_t kTrainTag = hash_string("baton synthetic images train");
const uint64_t kValidTag = hash_string("baton synthetic images valid");

// Sum of the four 16-bit fields of r (each uniform on [0, 65535]: mean 32767.5, variance
// (65536² − 1)/12), shifted and scaled to mean 0 and variance 1.
float irwin_hall4(uint64_t r) {
  constexpr double kMean = 4 * 32767.5;
  const double kScale = 1.0 / std::sqrt((65536.0 * 65536.0 - 1.0) / 3.0);
  const uint64_t sum = (r & 0xffff) + ((r >> 16) & 0xffff) + ((r >> 32) & 0xffff) + (r >> 48);
  return static_cast<float>((static_cast<double>(sum) - kMean) * kScale);
}

}  // namespace

SyntheticImages::SyntheticImages(int channels, int height, int width, int classes, uint64_t seed)
    : channels_(channels), height_(height), width_(width), classes_(classes), seed_(seed) {
  BATON_REQUIRE(channels > 0 && height > 0 && width > 0 && classes > 0,
                fmt::format("synthetic images need positive sizes, got {} channels of {}×{} and {} "
                            "classes",
                            channels, height, width, classes),
                "set model.in_channels, model.image_size and model.classes to positive values");
}

void SyntheticImages::write_sample(uint64_t key, float* image, int32_t* label) const {
  Rng rng(key);
  *label = static_cast<int32_t>(rng.below(static_cast<uint64_t>(classes_)));
  const size_t floats = sample_floats();
  for (size_t j = 0; j < floats; ++j) image[j] = irwin_hall4(rng.next_u64());
}

void SyntheticImages::train_sample(int64_t step, int row, float* image, int32_t* label) const {
  write_sample(mix({seed_, kTrainTag, static_cast<uint64_t>(step), static_cast<uint64_t>(row)}),
               image, label);
}

void SyntheticImages::eval_sample(int64_t index, float* image, int32_t* label) const {
  write_sample(mix({seed_, kValidTag, static_cast<uint64_t>(index)}), image, label);
}

}  // namespace baton
