// Layer: the unit a model is built from and a pipeline stage holds a contiguous range of. A layer
// registers its parameters (and non-trainable buffers, e.g. batch-norm statistics) in the
// ParamTable, says how many bytes of activations it takes, saves and returns per micro-batch and
// how much shared scratch it needs, and runs forward/backward on one micro-batch. Shapes are
// (B samples, T positions); a model whose samples have no positions (images) uses T = 1.
// Activations (and the compute weights) are in the backend's act_dtype (fp32 or bf16); sizes are
// in bytes so one buffer can hold bf16 activations and fp32 statistics (model/carver.h).
//
// Activations are stored explicitly per micro-batch in a `saved` buffer owned by the caller, so a
// pipeline can keep several micro-batches in flight; scratch (`LayerCtx::workspace`) is shared and
// only valid inside one call.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "backend/backend.h"
#include "model/param_table.h"

namespace baton {

// Everything a layer call needs besides its input/output buffers.
struct LayerCtx {
  Backend* be = nullptr;
  const ParamTable* table = nullptr;
  void* params = nullptr;   // flat compute-weight buffer (act dtype; backend memory)
  float* grads = nullptr;   // flat fp32 gradient buffer (write_grads / grad below)
  // One flag per parameter: its gradient has not been written since SequentialModel::zero_grads(),
  // which clears nothing but sets these (the first backward op writes the tensor instead of adding
  // to zeros: no zeroing pass over the gradients, no read of their old values). Null: every tensor
  // holds a valid sum and is added to.
  uint8_t* grad_unwritten = nullptr;
  float* buffers = nullptr;  // flat fp32 non-trainable buffers (ParamTable::add_buffer)
  void* workspace = nullptr;
  int B = 0, T = 0;                   // micro-batch shape
  const int32_t* tokens = nullptr;    // [B,T] (backend memory)
  const int32_t* tokens_host = nullptr;  // the same tokens in host memory (may be null)
  const float* images = nullptr;      // [B, ...] input images (backend memory, fp32)
  const int32_t* targets = nullptr;   // one per loss term (backend memory); null: no loss wanted
  bool training = true;  // forward also prepares what backward needs (e.g. logits gradient);
                         // batch norm uses batch statistics, dropout drops
  // Dropout (core/dropout_mask.h): the seed of this micro-batch's batch (the run's seed mixed with
  // the batch index) and the batch row of its first sample; a layer mixes in its global index.
  uint64_t batch_seed = 0;
  int row0 = 0;
  // d(total loss)/d(one loss term): 1 / the loss terms of the optimizer step (the model's scale).
  float loss_scale = 1.0f;

  void* param(int i) const {
    return static_cast<char*>(params) + table->offset(i) * be->act_size();
  }
  // The gradients of a dense layer's weight w and bias b (b < 0: none) for an op that can write or
  // add them (Backend::matmul_backward's accumulate_dweight): both unwritten → write; otherwise any
  // unwritten one is zeroed and the op adds. Both count as written afterwards.
  struct ParamGrads {
    float* w;
    float* b;
    bool accumulate;
  };
  ParamGrads write_grads(int w, int b = -1) const {
    ParamGrads g{table->at(grads, w), b >= 0 ? table->at(grads, b) : nullptr, true};
    if (grad_unwritten == nullptr) return g;
    g.accumulate = !(grad_unwritten[w] && (b < 0 || grad_unwritten[b]));
    if (g.accumulate) {
      grad(w);
      if (b >= 0) grad(b);
    }
    grad_unwritten[w] = 0;
    if (b >= 0) grad_unwritten[b] = 0;
    return g;
  }
  // Parameter i's gradient for an op that only adds to it (scatters, normalisation and convolution
  // sums): zeroed first if unwritten.
  float* grad(int i) const {
    float* g = table->at(grads, i);
    if (grad_unwritten != nullptr && grad_unwritten[i]) {
      be->zero(g, table->numel(i));
      grad_unwritten[i] = 0;
    }
    return g;
  }
  float* buffer(int i) const { return table->buffer_at(buffers, i); }
};

class Layer {
 public:
  virtual ~Layer() = default;
  virtual std::string name() const = 0;
  virtual void add_params(ParamTable& table) = 0;
  // Bytes this layer keeps per micro-batch between forward and backward (its output included).
  virtual size_t saved_bytes(int B, int T) const = 0;
  // Shared scratch bytes one call needs.
  virtual size_t workspace_bytes(int B, int T) const = 0;
  // Bytes of this layer's output per micro-batch (what the next layer or stage receives), and of
  // its input (what it receives from the previous layer; 0 for a layer that reads the
  // micro-batch's inputs itself).
  virtual size_t output_bytes(int B, int T) const = 0;
  virtual size_t input_bytes(int B, int T) const = 0;
  // A loss layer's output is its per-term losses (fp32): how many for a micro-batch. 0 otherwise.
  virtual int64_t loss_terms(int /*B*/, int /*T*/) const { return 0; }
  // A loss layer's evaluation metrics (ModelBuilder::metric_names; a classifier's top-1/top-5
  // hits): after a forward with targets and training = false, metric m's per-sample values [B]
  // (fp32) inside `saved`.
  virtual const float* metric(const void* /*saved*/, int /*B*/, int /*T*/, int /*m*/) const {
    return nullptr;
  }
  // Full recomputation (PTD-P §3) applies to this layer: only its output is kept between forward
  // and backward, the rest is recomputed. (A GPT's transformer blocks; not its embedding or head.)
  virtual bool recomputable() const { return false; }
  // The output lives inside `saved`; returns where.
  virtual void* output(void* saved, int B, int T) const = 0;
  // in: previous layer's output (unused by the first layer, which reads ctx.tokens / ctx.images).
  virtual void forward(const LayerCtx& ctx, const void* in, void* saved) = 0;
  // dout: gradient w.r.t. this layer's output (unused by the loss layer); din: gradient w.r.t.
  // `in`, overwritten (null for the first layer).
  virtual void backward(const LayerCtx& ctx, const void* in, const void* dout, void* din,
                        void* saved) = 0;

  // Zero bubble (Qi et al. 2023, §2): the backward split into an input part (everything the
  // gradient w.r.t. `in` needs, every collective included) and a weight part (the parameter
  // gradients: dW and db of every matmul, layernorm gains and biases, embedding tables) that may
  // run later. What the weight part needs besides `saved` and `in` (each matmul's output gradient)
  // is kept in `deferred`, deferred_bytes() per micro-batch, between the two calls; `saved`, `in`
  // and the micro-batch's tokens must stay valid until backward_weight. backward_input followed by
  // backward_weight gives exactly backward's gradients (bit for bit).
  virtual size_t deferred_bytes(int /*B*/, int /*T*/) const { return 0; }
  // Default (a layer without a split): the whole backward now, nothing left for the weight part.
  virtual void backward_input(const LayerCtx& ctx, const void* in, const void* dout, void* din,
                              void* saved, void* /*deferred*/) {
    backward(ctx, in, dout, din, saved);
  }
  virtual void backward_weight(const LayerCtx& /*ctx*/, const void* /*in*/, void* /*saved*/,
                               void* /*deferred*/) {}
};

}  // namespace baton
