// WeightVersions; see weight_versions.h.
#include "train/weight_versions.h"

#include <algorithm>

#include "core/error.h"

namespace baton {

WeightVersions::~WeightVersions() {
  m_.use_params(nullptr);
  for (float* b : ring_) m_.backend().release(b);
}

void WeightVersions::start(int size) {
  BATON_ASSERT(size >= 1, "a ring of {} weight versions", size);
  while (static_cast<int>(ring_.size()) < size)
    ring_.push_back(static_cast<float*>(m_.backend().alloc(m_.flat_size() * sizeof(float))));
  size_ = size;
  version_.assign(size, -1);
  m_.backend().copy(ring_[0], m_.params(), m_.flat_size());
  version_[0] = 0;
  latest_ = 0;
}

float* WeightVersions::buffer(int version) {
  const int idx = version % size_;
  BATON_ASSERT(version >= 0 && version_[idx] == version,
               "weight version {} is no longer kept (ring of {})", version, size_);
  return ring_[idx];
}

void WeightVersions::select(int version) { m_.use_params(buffer(version < 0 ? latest_ : version)); }

float* WeightVersions::next(int version) {
  BATON_ASSERT(version == latest_ + 1, "update to version {} after version {}", version, latest_);
  float* prev = buffer(latest_);
  const int idx = version % size_;
  if (ring_[idx] != prev) m_.backend().copy(ring_[idx], prev, m_.flat_size());
  version_[idx] = version;
  latest_ = version;
  return ring_[idx];
}

void WeightVersions::for_each_from(int version, const std::function<void(int, float*)>& fn) {
  for (int v = std::max(version, latest_ - size_ + 1); v <= latest_; ++v)
    if (version_[v % size_] == v) fn(v, ring_[v % size_]);
}

void WeightVersions::publish_latest() {
  m_.use_params(nullptr);
  m_.backend().copy(m_.params(), buffer(latest_), m_.flat_size());
}

}  // namespace baton
