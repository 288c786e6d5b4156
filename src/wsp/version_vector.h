// Version vector: which updates a copy of the weights contains, as a set of (virtual worker,
// minibatch) pairs (minibatches 1-indexed, as in the HetPipe paper). WSP weights are sums
// w0 + Σ u_{n,p}; tracking the set next to every weight copy lets tests and metrics read the
// staleness a minibatch really saw instead of recomputing it.
//
// Invariant: an update is added at most once — adding one already present is a bug (it would be
// applied twice to the tensors), so add() and merge() assert disjointness.
// Representation: per VW a sorted list of disjoint half-open intervals [first, end) — WSP copies
// are a few intervals (pushed waves, own finished minibatches), however long the run.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace baton::wsp {

class VersionVector {
 public:
  VersionVector() = default;
  explicit VersionVector(int num_vw) : sets_(num_vw) {}

  int num_vw() const { return static_cast<int>(sets_.size()); }
  bool contains(int vw, int minibatch) const;
  // Every minibatch first..last (inclusive) of `vw` is present (true when the range is empty).
  bool contains_range(int vw, int first, int last) const;
  // Largest k such that 1..k of `vw` are all present (0 when minibatch 1 is missing).
  int prefix(int vw) const;
  // Largest minibatch of `vw` present (0 when none).
  int max(int vw) const;
  int count(int vw) const;

  void add(int vw, int minibatch);
  void add_range(int vw, int first, int last);  // inclusive; no-op when empty
  // Union with `other`, which must share no update with this one (the WSP merge rule adds the
  // VW's own unpushed updates to a pulled w_global that cannot contain them).
  void merge(const VersionVector& other);
  // Every update of `other` is in this one.
  bool includes(const VersionVector& other) const;
  // This one less the updates of `other`, which it must include (the WSP runtime's tags: a wave's ũ
  // is the latest weights' updates less the wave start's).
  VersionVector without(const VersionVector& other) const;
  // `vw`'s updates as inclusive ranges [first, last], ascending (for traces).
  std::vector<std::pair<int, int>> ranges(int vw) const;

  bool operator==(const VersionVector&) const = default;
  // "vw0:1-7 vw1:1-4" (empty VWs omitted; "{}" when nothing).
  std::string to_string() const;

 private:
  using Intervals = std::vector<std::pair<int, int>>;  // [first, end), sorted, disjoint, non-adjacent
  std::vector<Intervals> sets_;
  const Intervals& at(int vw) const;
};

}  // namespace baton::wsp
