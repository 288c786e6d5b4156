// Optimizer: what the trainer needs of AdamW and SGD — one update of the segments of the flat
// parameter buffer this rank updates (every parameter, or with ZeRO-1 its pieces), and the state
// tensors it keeps (laid out as the segments back to back, state_size() floats each), named by the
// checkpoint group they are saved under. make_optimizer builds the configured kind.
//
// Weight decay applies to the parameters whose ParamSpec says `decay` (matrices and convolution
// kernels; not norm gains, norm biases or biases), or to every parameter with
// optim.decay_norm_and_bias = true.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "config/config.h"
#include "optim/data_parallel.h"

namespace baton {

class Optimizer {
 public:
  struct State {
    const char* group;  // checkpoint dataset group, e.g. "optim/m/"
    float* data;        // state_size() floats (backend memory)
  };

  Optimizer(Backend& be, std::vector<UpdateSegment> segments, size_t state_size, const OptimConfig& cfg)
      : be_(be), segments_(std::move(segments)), state_size_(state_size), cfg_(cfg) {}
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update with learning rate `lr`; gradients are multiplied by `grad_scale` first (clipping).
  // `step` is the 1-based count of updates (Adam's bias correction).
  virtual void step(float* params, const float* grads, double lr, float grad_scale, int64_t step) = 0;
  virtual std::vector<State> state() = 0;
  size_t state_size() const { return state_size_; }
  const std::vector<UpdateSegment>& segments() const { return segments_; }

 protected:
  float decay_of(const UpdateSegment& s) const {
    return s.decay || cfg_.decay_norm_and_bias ? static_cast<float>(cfg_.weight_decay) : 0.0f;
  }
  float* alloc_state();  // state_size() floats, zeroed; released by the destructor of the kind
  Backend& be_;
  std::vector<UpdateSegment> segments_;
  size_t state_size_ = 0;
  OptimConfig cfg_;
};

// optim.kind: "adamw" (AdamW) or "sgd" (SGD), over `segments` with `state_size` floats of state.
std::unique_ptr<Optimizer> make_optimizer(Backend& be, std::vector<UpdateSegment> segments,
                                          size_t state_size, const OptimConfig& cfg);

// Every parameter of `table` as one segment each, state laid out like the parameters (one
// process without data parallelism).
std::vector<UpdateSegment> every_parameter(const ParamTable& table);

}  // namespace baton
