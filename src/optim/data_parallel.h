// Data-parallel gradient reduction with buckets overlapped with the backward pass, and ZeRO-1
// optimizer-state sharding (Rajbhandari et al., stage 1).
//
// The flat gradient buffer (ParamTable layout, parameters in layer order) is cut into buckets of
// about `bucket_bytes`, walking from the end of the buffer (last layer: first to finish backward)
// to the start. A bucket is launched as an asynchronous all-reduce (or, with ZeRO-1, a
// reduce-scatter) as soon as every layer it touches has finished its last backward before the
// update (and, for a bucket holding a tied parameter's shared copy, once that has been summed over
// the tied group: set_late / late_done). Readiness comes from the program, which every
// data-parallel rank runs identically, so every rank launches the buckets in the same order.
// Bucket boundaries are multiples of 16·dp floats, so with ZeRO-1 each bucket splits evenly: rank
// r owns piece r of every bucket, keeps AdamW state for its pieces only, updates them, and
// all-gathers the parameters afterwards.
//
// Gradients are summed, not averaged: the loss scale (1 / tokens of the global batch) already
// makes the sum the mean over the global batch.
#pragma once
#include <cstddef>
#include <vector>

#include "backend/backend.h"
#include "dist/comm.h"
#include "model/param_table.h"

namespace baton {

// A run of flat-buffer floats inside one parameter that this rank updates.
struct UpdateSegment {
  size_t flat = 0;    // offset in the flat parameter/gradient buffers
  size_t state = 0;   // offset in this rank's optimizer-state buffers
  size_t n = 0;
  bool decay = false;
  bool in_norm = true;  // counts towards the global grad norm on this rank (see grad_sumsq)
};

class DataParallelGrads {
 public:
  // `layer_of_param[i]`: the layer whose backward completes parameter i's gradient.
  // `dp` may be null (no data parallelism). `tp_rank0`: replicated parameters count towards the
  // grad norm only on tensor-parallel rank 0.
  DataParallelGrads(Backend& be, const ParamTable& table, std::vector<int> layer_of_param,
                    dist::Comm* dp, bool zero1, size_t bucket_bytes, bool tp_rank0);

  int dp_size() const { return dp_ ? dp_->size() : 1; }
  bool zero1() const { return zero1_; }
  size_t num_buckets() const { return buckets_.size(); }
  // Segments of the flat buffers this rank's optimizer updates, and the state length they need.
  const std::vector<UpdateSegment>& segments() const { return segments_; }
  size_t state_size() const { return state_size_; }

  // Parameters whose gradients are final only at late_done() (a tied parameter's copy, summed over
  // the stages sharing it first); buckets holding them wait for it.
  void set_late(const ParamTable& table, const std::vector<int>& params);
  // Local `layer`'s gradients are final for this update (its last backward before it ran):
  // launches every bucket that is now complete.
  void layer_done(int layer, float* grads);
  // The late parameters' gradients are final.
  void late_done(float* grads);
  // Launches what is left and waits for every bucket; afterwards the gradients this rank updates
  // hold the sum over data-parallel ranks.
  void finish(float* grads);
  // Buckets the last finish() found launched already (overlapped with the backward).
  int launched_early() const { return early_; }
  // Sum of squares of this rank's reduced gradients (its segments with in_norm). Summed over the
  // data-parallel (ZeRO-1) and tensor-parallel groups it gives the squared global norm.
  double grad_sumsq(const float* grads) const;
  // Leaves parameter `param` out of grad_sumsq on this rank: a copy whose gradient another rank
  // also counts (the pipeline's second copy of the tied wte, on the last stage).
  void exclude_from_norm(const ParamTable& table, int param);
  // ZeRO-1: all-gathers the updated parameter pieces so every rank holds the full parameters.
  void gather_params(float* params);

  // Moving optimizer state between this rank's compact layout (segments back to back) and the
  // flat parameter layout, for checkpoints. Only this rank's segments are copied.
  void state_to_flat(const float* state, float* flat) const;
  void flat_to_state(const float* flat, float* state) const;
  // ZeRO-1: completes a flat buffer that holds this rank's pieces with every other rank's pieces
  // (collective over the data-parallel group; no-op without ZeRO-1).
  void gather_flat(float* flat);

 private:
  struct Bucket {
    size_t lo = 0, hi = 0;  // flat range [lo, hi), (hi - lo) % dp == 0
    int min_layer = -1, max_layer = -1;  // the layers it touches (-1: only padding)
    bool late = false;                   // holds a late parameter
    bool launched = false;
    dist::RequestPtr request;
  };
  void launch(Bucket& b, float* grads);
  void launch_ready(float* grads);
  void build_segments(const ParamTable& table);

  Backend& be_;
  dist::Comm* dp_;
  bool zero1_;
  bool tp_rank0_;
  std::vector<Bucket> buckets_;  // in launch order (descending flat offsets)
  std::vector<int> layer_of_param_;
  std::vector<bool> layer_done_;
  bool late_done_ = false;
  int early_ = 0;
  std::vector<UpdateSegment> segments_;
  size_t state_size_ = 0;
  // ZeRO-1's reduce-scatter receive buffer (a separate one per bucket, back to back): the backend's
  // memory, so that on a GPU the collective reads and writes device buffers (DeviceComm routes by
  // where the pointers live) and the copy back into the gradients stays on the device.
  float* scratch_ = nullptr;
};

}  // namespace baton
