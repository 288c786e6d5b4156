#include "model/param_table.h"

#include "core/error.h"

namespace baton {

int ParamTable::add(ParamSpec spec) {
  BATON_ASSERT(find(spec.name) < 0, "parameter '{}' registered twice", spec.name);
  size_t n = 1;
  for (int64_t d : spec.shape) {
    BATON_ASSERT(d > 0, "parameter '{}' has a non-positive dimension", spec.name);
    n *= static_cast<size_t>(d);
  }
  constexpr size_t kAlign = 16;
  total_ = (total_ + kAlign - 1) / kAlign * kAlign;
  offsets_.push_back(total_);
  numels_.push_back(n);
  total_ += n;
  specs_.push_back(std::move(spec));
  return size() - 1;
}

size_t ParamTable::count() const {
  size_t c = 0;
  for (size_t n : numels_) c += n;
  return c;
}

int ParamTable::find(const std::string& name) const {
  for (int i = 0; i < size(); ++i)
    if (specs_[i].name == name) return i;
  return -1;
}

}  // namespace baton
