// A micro-batch as the runtime hands it to a model: its shape, its inputs (token ids for a GPT,
// images for a CNN) and its targets (next-token ids or class labels), in host memory. Data
// sources fill a HostBatch; models copy what their first and last stage need into an activation
// slot (SequentialModel::load). Samples are rows: B samples of T positions each (T = 1 for an
// image model); a model says how many loss terms a sample has (ModelBuilder::target_elements).
#pragma once
#include <cstdint>
#include <vector>

namespace baton {

enum class InputKind : uint8_t { TOKENS, IMAGES };

struct MicroBatch {
  int B = 0;  // samples
  int T = 1;  // positions per sample (tokens of a sequence; 1 for images)
  const int32_t* tokens = nullptr;   // [B,T] token ids (InputKind::TOKENS)
  const float* images = nullptr;     // [B, input elements per sample] (InputKind::IMAGES)
  const int32_t* targets = nullptr;  // target ids, one per loss term; null: forward only
  // Where the samples come from: rows [row, row + B) of batch `batch` (a training step or a
  // validation batch). Draws that belong to a sample (dropout masks) are keyed by it, so every
  // layout draws the same.
  int64_t batch = 0;
  int row = 0;
};

// Owning host storage for one micro-batch.
struct HostBatch {
  int B = 0, T = 1;
  std::vector<int32_t> tokens, targets;
  std::vector<float> images;
  int64_t batch = 0;
  int row = 0;
  MicroBatch view() const {
    return MicroBatch{.B = B, .T = T, .tokens = tokens.empty() ? nullptr : tokens.data(),
                      .images = images.empty() ? nullptr : images.data(),
                      .targets = targets.empty() ? nullptr : targets.data(), .batch = batch, .row = row};
  }
};

}  // namespace baton
