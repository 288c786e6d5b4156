// WeightVersions: the weight stash of the asynchronous schedules (PipeDream's weight stashing,
// PipeDream-2BW's double buffering; notes-dissertation §1.3, §1.4): a ring of parameter buffers
// laid out like the model's, version n in slot n mod size. The executor names the version each
// compute op reads (Executor::weight_versions() is how many are alive at once, so the ring never
// overwrites a version still needed); an optimizer step writes version n + 1 from version n.
// The latest version is published to the model's parameters after each trainer step (what
// checkpoints, evaluation and sampling read). fp32 weights only (config validation refuses weight
// stashing with bf16 compute).
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
  // The buffer of version `version` = latest + 1, a copy of the latest to be updated in place.
  float* next(int version);
  int latest() const { return latest_; }
  // Calls fn(version, buffer) for every kept version >= `version`, oldest first (the WSP merge
  // rebases the weight history from a wave's end onto the pulled global weights).
  void for_each_from(int version, const std::function<void(int, float*)>& fn);
  // The latest version becomes the model's parameters; the model reads them again.
  void publish_latest();

 private:
  float* buffer(int version);
  SequentialModel& m_;
  std::vector<float*> ring_;
  std::vector<int> version_;  // version held by each ring slot (-1: none)
  int size_ = 1, latest_ = 0;
};

}  // namespace baton
