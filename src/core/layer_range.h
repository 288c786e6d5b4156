// A contiguous range of a model's global layers, [begin, end): what a pipeline stage (or one
// model chunk of an interleaved stage) holds. Global layers are the model's own list (a GPT:
// embedding, blocks, head), so the same ranges describe any model and any layout.
#pragma once
#include <vector>

namespace baton {

struct LayerRange {
  int begin = 0, end = 0;
  int size() const { return end - begin; }
  bool contains(int layer) const { return layer >= begin && layer < end; }
  bool operator==(const LayerRange&) const = default;
};

}  // namespace baton
