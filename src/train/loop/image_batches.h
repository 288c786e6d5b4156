// The BatchSource of an image model: an IDX dataset (data.train + data.train_labels, optional
// data.valid + data.valid_labels) through ImageLoader — per-channel normalisation with the training
// images' statistics (data.normalize), the seed's per-epoch shuffle, optional crop_flip
// (data.augment) —, a JPEG folder (data.format = "image_folder") through ImageFolderSource with
// a next-step prefetch, or SyntheticImages (data.synthetic) of the model's shape. Rows are pure
// functions of (step, row) (data/image_source.h), as every BatchSource's.
#pragma once
#include <memory>

#include "config/config.h"
#include "train/loop/batch_source.h"

namespace baton {

// Throws Error (with a hint) when the datasets are missing, damaged or do not fit the model
// (image size, channels, a label >= model.classes).
std::unique_ptr<BatchSource> make_image_batches(const Config& cfg);

}  // namespace baton
