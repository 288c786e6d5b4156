// Version vector: interval sets per virtual worker (see version_vector.h).
#include "wsp/version_vector.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace baton::wsp {

const VersionVector::Intervals& VersionVector::at(int vw) const {
  BATON_ASSERT(vw >= 0 && vw < num_vw(), "version vector: VW {} out of 0..{}", vw, num_vw() - 1);
  return sets_[vw];
}

bool VersionVector::contains(int vw, int minibatch) const {
  for (const auto& [a, b] : at(vw))
    if (minibatch >= a && minibatch < b) return true;
  return false;
}

bool VersionVector::contains_range(int vw, int first, int last) const {
  if (last < first) return true;
  // Intervals are non-adjacent, so a covered range lies inside a single interval.
  for (const auto& [a, b] : at(vw))
    if (first >= a && last < b) return true;
  return false;
}

int VersionVector::prefix(int vw) const {
  const Intervals& s = at(vw);
  return !s.empty() && s.front().first == 1 ? s.front().second - 1 : 0;
}

int VersionVector::max(int vw) const {
  const Intervals& s = at(vw);
  return s.empty() ? 0 : s.back().second - 1;
}

int VersionVector::count(int vw) const {
  int n = 0;
  for (const auto& [a, b] : at(vw)) n += b - a;
  return n;
}

void VersionVector::add(int vw, int minibatch) { add_range(vw, minibatch, minibatch); }

void VersionVector::add_range(int vw, int first, int last) {
  if (last < first) return;
  BATON_ASSERT(first >= 1, "version vector: minibatch {} (they are 1-indexed)", first);
  at(vw);
  Intervals& s = sets_[vw];
  for (const auto& [a, b] : s)
    BATON_ASSERT(last < a || first >= b, "version vector: update (VW {}, minibatches {}..{}) added twice",
                 vw, first, last);
  s.emplace_back(first, last + 1);
  std::sort(s.begin(), s.end());
  // Coalesce touching intervals so contains_range and prefix see one interval per run.
  Intervals out;
  for (const auto& iv : s) {
    if (!out.empty() && out.back().second == iv.first)
      out.back().second = iv.second;
    else
      out.push_back(iv);
  }
  s = std::move(out);
}

void VersionVector::merge(const VersionVector& other) {
  BATON_ASSERT(other.num_vw() == num_vw(), "version vector: merging {} VWs into {}", other.num_vw(),
               num_vw());
  for (int v = 0; v < num_vw(); ++v)
    for (const auto& [a, b] : other.sets_[v]) add_range(v, a, b - 1);
}

bool VersionVector::includes(const VersionVector& other) const {
  if (other.num_vw() != num_vw()) return false;
  for (int v = 0; v < num_vw(); ++v)
    for (const auto& [a, b] : other.sets_[v])
      if (!contains_range(v, a, b - 1)) return false;
  return true;
}

VersionVector VersionVector::without(const VersionVector& other) const {
  BATON_ASSERT(includes(other), "version vector: removing {} from {}, which lacks some of it", other.to_string(),
               to_string());
  VersionVector out(num_vw());
  for (int v = 0; v < num_vw(); ++v)
    for (const auto& [a, b] : sets_[v]) {
      // [a, b) less other's intervals inside it (other's intervals are sorted and disjoint).
      int from = a;
      for (const auto& [c, d] : other.sets_[v]) {
        if (d <= from || c >= b) continue;
        out.add_range(v, from, c - 1);
        from = d;
      }
      out.add_range(v, from, b - 1);
    }
  return out;
}

std::vector<std::pair<int, int>> VersionVector::ranges(int vw) const {
  std::vector<std::pair<int, int>> out;
  for (const auto& [a, b] : at(vw)) out.emplace_back(a, b - 1);
  return out;
}

std::string VersionVector::to_string() const {
  std::string out;
  for (int v = 0; v < num_vw(); ++v) {
    if (sets_[v].empty()) continue;
    out += fmt::format("{}vw{}:", out.empty() ? "" : " ", v);
    for (size_t i = 0; i < sets_[v].size(); ++i) {
      const auto [a, b] = sets_[v][i];
      out += fmt::format("{}{}", i ? "," : "", a == b - 1 ? fmt::format("{}", a) : fmt::format("{}-{}", a, b - 1));
    }
  }
  return out.empty() ? "{}" : out;
}

}  // namespace baton::wsp
