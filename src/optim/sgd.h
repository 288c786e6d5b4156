// SGD with momentum (Polyak; Nesterov optional) as PyTorch's torch.optim.SGD with dampening 0, and
// weight decay either added to the gradient (optim.weight_decay_mode = "l2", PyTorch's
// weight_decay) or decoupled from it (SGDW, Loshchilov & Hutter 2019 §2: the weights shrink by
// lr · wd · w, scaled by the learning rate as PyTorch scales AdamW's). State: the momentum buffer
// ("optim/momentum/<name>" in checkpoints); none without momentum. The per-element update is the
// backend's sgd_step (CPU: cpu_sgd.cpp; CUDA: kernels/sgd.cu).
#pragma once
#include "optim/optimizer.h"

namespace baton {

class Sgd final : public Optimizer {
 public:
  Sgd(Backend& be, std::vector<UpdateSegment> segments, size_t state_size, const OptimConfig& cfg);
  ~Sgd() override;
  void step(float* params, const float* grads, double lr, float grad_scale, int64_t step) override;
  std::vector<State> state() override;
  float* momentum_buffer() { return buf_; }

 private:
  float* buf_ = nullptr;  // null without momentum
};

}  // namespace baton
