// WeightVersions; see weight_versions.h.
#include "train/loop/weight_versions.h"

#include <algorithm>

#include "core/error.h"

namespace baton {

WeightVersions::~WeightVersions() {
  m_.use_params(nullptr);
  for (size_t i = 0; i < ring_.size(); ++i) {
    if (compute_[i] != ring_[i]) m_.backend().release(compute_[i]);
    m_.backend().release(ring_[i]);
  }
}

bool WeightVersions::separate_compute() const { return m_.backend().act_dtype() != DType::F32; }

void WeightVersions::start(int size) {
  BATON_ASSERT(size >= 1, "a ring of {} weight versions", size);
  Backend& be = m_.backend();
  while (static_cast<int>(ring_.size()) < size) {
    ring_.push_back(static_cast<float*>(be.alloc(m_.flat_size() * sizeof(float))));
    compute_.push_back(separate_compute() ? be.alloc(m_.flat_size() * be.act_size()) : ring_.back());
  }
  size_ = size;
  version_.assign(size, -1);
  stale_.assign(size, true);
  selected_ = -1;
  m_.use_params(nullptr);
  be.copy(ring_[0], m_.params(), m_.flat_size());
  version_[0] = 0;
  latest_ = 0;
}

int WeightVersions::slot(int version) const {
  const int idx = version % size_;
  BATON_ASSERT(version >= 0 && version_[idx] == version,
               "weight version {} is no longer kept (ring of {})", version, size_);
  return idx;
}

void WeightVersions::derive(int idx) {
  if (separate_compute())
    m_.backend().cast(compute_[idx], m_.backend().act_dtype(), ring_[idx], DType::F32, m_.flat_size());
  stale_[idx] = false;
}

void WeightVersions::select(int version) {
  const int idx = slot(version < 0 ? latest_ : version);
  if (stale_[idx]) derive(idx);
  selected_ = idx;
  m_.use_params(compute_[idx]);
}

float* WeightVersions::next(int version) {
  BATON_ASSERT(version == latest_ + 1, "update to version {} after version {}", version, latest_);
  float* prev = buffer(latest_);
  const int idx = version % size_;
  if (ring_[idx] != prev) m_.backend().copy(ring_[idx], prev, m_.flat_size());
  version_[idx] = version;
  stale_[idx] = true;  // the optimizer updates it after this returns
  latest_ = version;
  return ring_[idx];
}

void WeightVersions::for_each_from(int version, const std::function<void(int, float*)>& fn) {
  for (int v = std::max(version, latest_ - size_ + 1); v <= latest_; ++v)
    if (const int idx = v % size_; version_[idx] == v) {
      fn(v, ring_[idx]);
      stale_[idx] = true;
      if (idx == selected_) derive(idx);
    }
}

void WeightVersions::publish_latest() {
  m_.use_params(nullptr);
  selected_ = -1;
  m_.backend().copy(m_.params(), buffer(latest_), m_.flat_size());
  m_.refresh_compute_params();
}

}  // namespace baton
