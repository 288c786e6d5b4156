// GPT-2 (learned positions, pre-LayerNorm blocks, 4x GELU MLP, LM head tied to the token
// embedding, vocabulary padded to a multiple of 128) as a list of layers:
//   [Embedding, TransformerBlock x L, LmHead]
// Parameters and gradients are one flat buffer each, laid out by the ParamTable. Activations are
// kept in `slots`, one micro-batch per slot, so a schedule can keep several micro-batches in flight.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "model/gpt_dims.h"
#include "model/layer.h"
#include "model/param_table.h"
#include "model/tensor_parallel.h"

namespace baton {

class GptModel {
 public:
  // `tp` describes this rank's tensor-parallel group (default: none). With tp > 1 the ParamTable
  // holds this rank's shards; names and full shapes are those of the single-process model.
  // The flat buffers are padded to a multiple of `flat_multiple` floats (data-parallel buckets
  // split them evenly over ranks).
  GptModel(const GptDims& dims, Backend& backend, TensorParallel tp = {}, size_t flat_multiple = 16);
  ~GptModel();
  GptModel(const GptModel&) = delete;
  GptModel& operator=(const GptModel&) = delete;

  const GptDims& dims() const { return dims_; }
  const ParamTable& table() const { return table_; }
  const TensorParallel& tp() const { return tp_; }
  Backend& backend() { return be_; }
  float* params() { return params_; }
  float* grads() { return grads_; }
  int num_layers() const { return static_cast<int>(layers_.size()); }
  Layer& layer(int i) { return *layers_[i]; }

  // GPT-2 initialisation from the ParamTable's init specs. Each parameter draws from its own stream
  // seeded by (seed, name), so the weights do not depend on the order or sharding of parameters.
  void init_weights(uint64_t seed);
  void zero_grads();
  // Sums, across the tensor-parallel group, the partial gradients that sequence parallelism leaves
  // on each rank (layernorm parameters) of `layer`. Call once per step, after the layer's last
  // backward and before its gradients are reduced over data-parallel ranks.
  void reduce_sequence_parallel_grads(int layer);
  // This rank's share of the squared global gradient norm: tensor-parallel shards count on every
  // rank, replicated parameters on tensor-parallel rank 0 only, so that the sum over the
  // tensor-parallel group is the norm of the full model's gradient.
  double grad_sumsq_share();

  // Allocates `slots` activation slots for micro-batches of up to B x T (T <= seq_len) and the
  // shared scratch. Call again to change the shape; allocation happens only when it grows.
  void reserve(int B, int T, int slots);
  size_t activation_bytes() const { return act_floats_ * sizeof(float); }

  // Forward of one micro-batch into `slot`. tokens/targets are host arrays [B,T]; targets may be
  // null (logits only). In training mode the logits are turned into their gradient scaled by
  // `dloss`. Returns the sum of per-token losses (0 without targets).
  double forward(int slot, const int32_t* tokens, const int32_t* targets, int B, int T,
                 bool training, float dloss);
  // Backward of the micro-batch in `slot`; accumulates into grads(). `after_layer(l)`, if given,
  // runs when layer l's backward is done (layers finish in descending order).
  void backward(int slot, const std::function<void(int)>& after_layer = {});
  // The layer whose backward completes each parameter's gradient (the tied wte: the embedding).
  const std::vector<int>& layer_of_param() const { return layer_of_param_; }
  size_t flat_size() const { return flat_size_; }
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
  TensorParallel tp_;  // before layers_: they keep a reference
  std::vector<std::unique_ptr<Layer>> layers_;
  ParamTable table_;
  std::vector<int> layer_of_param_;
  size_t flat_size_ = 0;
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
