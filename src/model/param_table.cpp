#include "model/param_table.h"

#include <algorithm>

#include "core/error.h"

namespace baton {

std::vector<int64_t> full_shape(const ParamSpec& spec, int tp_size) {
  std::vector<int64_t> f = spec.shape;
  if (spec.tp_dim >= 0) f[spec.tp_dim] *= tp_size;
  return f;
}

std::vector<ShardBox> shard_boxes(const ParamSpec& spec, int tp_rank, int tp_size) {
  const std::vector<int64_t> full = full_shape(spec, tp_size);
  if (spec.tp_dim < 0 || tp_size == 1) {
    ShardBox b;
    b.offset.assign(full.size(), 0);
    b.extent = full;
    return {b};
  }
  const int d = spec.tp_dim;
  // With several blocks each box is contiguous in the local tensor only when tp_dim is the first.
  BATON_ASSERT(spec.tp_blocks == 1 || d == 0, "'{}': tp_blocks > 1 needs tp_dim 0", spec.name);
  const int64_t block = full[d] / spec.tp_blocks;  // one block of the full dimension
  const int64_t chunk = block / tp_size;           // this rank's slice of a block
  size_t inner = 1;
  for (size_t k = d + 1; k < full.size(); ++k) inner *= size_t(full[k]);
  std::vector<ShardBox> boxes;
  for (int b = 0; b < spec.tp_blocks; ++b) {
    ShardBox box;
    box.offset.assign(full.size(), 0);
    box.extent = full;
    box.offset[d] = b * block + tp_rank * chunk;
    box.extent[d] = chunk;
    box.local_offset = size_t(b) * size_t(chunk) * inner;
    boxes.push_back(box);
  }
  return boxes;
}

void extract_shard(const ParamSpec& spec, int tp_rank, int tp_size, const float* full, float* local) {
  const std::vector<int64_t> fs = full_shape(spec, tp_size);
  size_t total = 1;
  for (int64_t x : fs) total *= size_t(x);
  if (spec.tp_dim < 0 || tp_size == 1) {
    std::copy(full, full + total, local);
    return;
  }
  const int d = spec.tp_dim;
  size_t outer = 1, inner = 1;
  for (int k = 0; k < d; ++k) outer *= size_t(fs[k]);
  for (size_t k = d + 1; k < fs.size(); ++k) inner *= size_t(fs[k]);
  const size_t block = size_t(fs[d]) / spec.tp_blocks, chunk = block / tp_size;
  for (size_t o = 0; o < outer; ++o)
    for (int b = 0; b < spec.tp_blocks; ++b) {
      const float* src = full + (o * size_t(fs[d]) + b * block + tp_rank * chunk) * inner;
      local = std::copy(src, src + chunk * inner, local);
    }
}

int ParamTable::Entries::add(ParamSpec spec) {
  size_t n = 1;
  for (int64_t d : spec.shape) {
    BATON_ASSERT(d > 0, "tensor '{}' has a non-positive dimension", spec.name);
    n *= static_cast<size_t>(d);
  }
  constexpr size_t kAlign = 16;
  total = (total + kAlign - 1) / kAlign * kAlign;
  offsets.push_back(total);
  numels.push_back(n);
  total += n;
  specs.push_back(std::move(spec));
  return static_cast<int>(specs.size()) - 1;
}

int ParamTable::Entries::find(const std::string& name) const {
  for (size_t i = 0; i < specs.size(); ++i)
    if (specs[i].name == name) return static_cast<int>(i);
  return -1;
}

int ParamTable::add(ParamSpec spec) {
  BATON_ASSERT(find(spec.name) < 0 && find_buffer(spec.name) < 0, "tensor '{}' registered twice",
               spec.name);
  return params_.add(std::move(spec));
}

int ParamTable::add_buffer(ParamSpec spec) {
  BATON_ASSERT(find(spec.name) < 0 && find_buffer(spec.name) < 0, "tensor '{}' registered twice",
               spec.name);
  BATON_ASSERT(spec.init != ParamSpec::Init::NORMAL, "buffer '{}' must start as zeros or ones",
               spec.name);
  spec.decay = false;
  return buffers_.add(std::move(spec));
}

size_t ParamTable::count() const {
  size_t c = 0;
  for (size_t n : params_.numels) c += n;
  return c;
}

}  // namespace baton
