// GPT-2 (learned positions, pre-LayerNorm blocks, 4x GELU MLP, LM head tied to the token
// embedding, vocabulary padded to a multiple of 128) as a list of layers:
//   [Embedding, TransformerBlock x L, LmHead]
// Parameters and gradients are one flat buffer each, laid out by the ParamTable. Activations are
// kept in `slots`, one micro-batch per slot, so a schedule can keep several micro-batches in flight.
#pragma once
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "model/gpt_dims.h"
#include "model/layer.h"
#include "model/param_table.h"

namespace baton {

class GptModel {
 public:
  GptModel(const GptDims& dims, Backend& backend);
  ~GptModel();
  GptModel(const GptModel&) = delete;
  GptModel& operator=(const GptModel&) = delete;

  const GptDims& dims() const { return dims_; }
  const ParamTable& table() const { return table_; }
  Backend& backend() { return be_; }
  float* params() { return params_; }
  float* grads() { return grads_; }
  int num_layers() const { return static_cast<int>(layers_.size()); }
  Layer& layer(int i) { return *layers_[i]; }

  // GPT-2 initialisation from the ParamTable's init specs. Each parameter draws from its own stream
  // seeded by (seed, name), so the weights do not depend on the order or sharding of parameters.
  void init_weights(uint64_t seed);
  void zero_grads();

  // Allocates `slots` activation slots for micro-batches of up to B x T (T <= seq_len) and the
  // shared scratch. Call again to change the shape; allocation happens only when it grows.
  void reserve(int B, int T, int slots);
  size_t activation_bytes() const { return act_floats_ * sizeof(float); }

  // Forward of one micro-batch into `slot`. tokens/targets are host arrays [B,T]; targets may be
  // null (logits only). In training mode the logits are turned into their gradient scaled by
  // `dloss`. Returns the sum of per-token losses (0 without targets).
  double forward(int slot, const int32_t* tokens, const int32_t* targets, int B, int T,
                 bool training, float dloss);
  // Backward of the micro-batch in `slot`; accumulates into grads().
  void backward(int slot);
  // Logits [B*T, Vp] of `slot` after a forward without targets (backend memory).
  const float* logits(int slot) const;

 private:
  struct Slot {
    float* saved = nullptr;  // every layer's saved activations, layer after layer
    int32_t* tokens = nullptr;
    int32_t* targets = nullptr;
    int B = 0, T = 0;
    bool has_targets = false;
  };
  LayerCtx ctx_for(const Slot& s, bool training, float dloss) const;
  float* layer_saved(const Slot& s, int layer) const;
  void free_activations();

  GptDims dims_;
  Backend& be_;
  std::vector<std::unique_ptr<Layer>> layers_;
  ParamTable table_;
  float* params_ = nullptr;
  float* grads_ = nullptr;
  std::vector<Slot> slots_;
  std::vector<size_t> layer_offsets_;  // offset of each layer's saved block inside a slot
  float* workspace_ = nullptr;
  float* dbuf_[2] = {nullptr, nullptr};  // ping-pong gradients between layers
  size_t act_floats_ = 0;
  int cap_B_ = 0, cap_T_ = 0;
  std::vector<float> loss_host_;
};

}  // namespace baton
