// WeightVersions: the weight stash of the asynchronous schedules (PipeDream's weight stashing,
// PipeDream-2BW's double buffering; notes-dissertation §1.3, §1.4): a ring of parameter buffers
// laid out like the model's, version n in slot n mod size. The executor names the version each
// compute op reads (Executor::weight_versions() is how many are alive at once, so the ring never
// overwrites a version still needed); an optimizer step writes version n + 1 from version n.
// The latest version is published to the model's parameters after each trainer step (what
// checkpoints, evaluation and sampling read). Versions are fp32 (the optimizer's masters); with
// bf16 compute every slot also keeps its compute copy, cast from the version when the model first
// reads it after a change (next(), for_each_from()), so the ops read each version exactly as
// they read compute_params() after refresh_compute_params().
#pragma once
#include <functional>
#include <vector>

#include "model/sequential_model.h"

namespace baton {

class WeightVersions {
 public:
  explicit WeightVersions(SequentialModel& model) : m_(model) {}
  ~WeightVersions();
  WeightVersions(const WeightVersions&) = delete;
  WeightVersions& operator=(const WeightVersions&) = delete;

  // A segment starts (a drained pipeline): `size` buffers, version 0 = the model's parameters.
  void start(int size);
  // The model computes with `version` (-1: the latest).
  void select(int version);
  // The buffer of version `version` = latest + 1, a copy of the latest to be updated in place
  // (its compute copy is re-derived when it is next selected).
  float* next(int version);
  int latest() const { return latest_; }
  // The fp32 weights of a kept version, to read (asserts it is kept).
  const float* weights(int version) const { return ring_[slot(version)]; }
  // Calls fn(version, buffer) for every kept version >= `version`, oldest first (the WSP merge
  // rebases the weight history from a wave's end onto the pulled global weights); fn may change
  // the buffers. The selected version's compute copy follows at once (the merge runs between a
  // forward's select() and its compute); the others' when next selected.
  void for_each_from(int version, const std::function<void(int, float*)>& fn);
  // The latest version becomes the model's parameters (and their compute copy); the model reads
  // them again.
  void publish_latest();

 private:
  int slot(int version) const;
  float* buffer(int version) { return ring_[slot(version)]; }
  bool separate_compute() const;  // compute copies apart from the fp32 versions (bf16 compute)
  void derive(int idx);           // compute_[idx] from ring_[idx]
  SequentialModel& m_;
  std::vector<float*> ring_;
  std::vector<void*> compute_;  // ring_[i]'s compute copy (== ring_[i] in fp32)
  std::vector<int> version_;    // version held by each ring slot (-1: none)
  std::vector<bool> stale_;     // compute_[i] not yet derived from ring_[i]
  int selected_ = -1;           // the slot the model computes with (-1: its own parameters)
  int size_ = 1, latest_ = 0;
};

}  // namespace baton
