// BufferSync: batch norm's running statistics (the model's non-trainable buffers) kept equal on
// every copy of a stage, and equal to what one process would compute.
//
// A running statistic is r ← a·r + (1 − a)·s per micro-batch (a = 1 − momentum, batch norm's
// convention), linear in r. One process running the step's k = D·m micro-batches in order ends at
//   r_k = a^k·r_0 + Σ_i (1 − a)·a^(k−i)·s_i.
// Data-parallel group g runs micro-batches g·m + 1 … (g + 1)·m (its rows of the global batch) from
// the same r_0 and ends at r'_g = a^m·r_0 + Σ_j (1 − a)·a^(m−j)·s_(g·m+j); the weights it needs are
// a^(m·(D−1−g)) times its own, so
//   r_k = a^(D·m)·r_0 + Σ_g a^(m·(D−1−g))·(r'_g − a^m·r_0)
// is one all-reduce of each group's term: exact (up to rounding) under synchronous schedules, where
// the step's forwards all precede its update. Asynchronous schedules (pipedream, 2bw) run forwards
// of later micro-batches before an update, and 1F1B-RR's stage replicas take every r-th
// micro-batch: there the copies are averaged at each update (timm's distributed BN reduce), so they
// still agree, but not with one process.
#pragma once
#include <cstddef>

#include "dist/comm.h"
#include "model/sequential_model.h"

namespace baton {

class BufferSync {
 public:
  // `dp`, `replica`: the data-parallel group and 1F1B-RR's stage replicas (null or size 1: none).
  // `exact`: a synchronous schedule whose groups each run `microbatches` micro-batches per update.
  BufferSync(SequentialModel& model, dist::Comm* dp, dist::Comm* replica, bool exact, int microbatches,
             float momentum);
  ~BufferSync();
  BufferSync(const BufferSync&) = delete;
  BufferSync& operator=(const BufferSync&) = delete;

  // Before the step's first forward (exact mode: remembers r_0).
  void begin_step();
  // After the step's (or, asynchronous, each) update's last forward on this rank.
  void update();

 private:
  SequentialModel& model_;
  dist::Comm* dp_;
  dist::Comm* replica_;
  bool exact_;
  int m_;
  float a_;
  size_t n_ = 0;
  float* r0_ = nullptr;  // exact mode: the buffers at the step's start
};

}  // namespace baton
