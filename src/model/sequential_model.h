// SequentialModel: the model-agnostic layer stack every model family is built into (a
// ModelBuilder says which layers; GPT is one builder, model/gpt.h). It holds the layers of this
// rank's model chunks only — one chunk with all global layers without pipelining; with pipeline
// parallelism the chunks the Layout gives this rank (dist/layout.h). Parameter names stay global
// so checkpoints load under any layout. A parameter shared by several global layers (a GPT's tied
// wte) is held once per rank, by each rank that holds one of those layers; the runtime keeps the
// copies identical (ModelBuilder::tied_layers).
//
// Parameters and gradients are one flat buffer each, laid out by the ParamTable in local layer
// order: fp32 master weights and fp32 gradients; non-trainable buffers (batch-norm statistics) a
// third, fp32. Ops read the compute weights — the masters themselves when the backend computes in
// fp32, else a flat copy in the backend's act dtype (bf16) refreshed from the masters by
// refresh_compute_params() after every change to them. Activations are kept in `slots`: one slot
// holds one (chunk, micro-batch) from its forward to its backward, the micro-batch's inputs and
// targets, plus the chunk's boundary buffers (received input, received output gradient, computed
// input gradient), so a pipeline schedule can keep several micro-batches in flight and an executor
// can receive into and send from them.
//
// Activation recomputation (PTD-P notes-dissertation §3, Korthikanti et al.): FULL keeps only the
// output of each recomputable layer (Layer::recomputable: a GPT's transformer blocks) and re-runs
// its forward right before its backward; SELECTIVE is the layers' own business (the builder builds
// them for it). Losses and gradients are identical to no recomputation.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/layer_range.h"
#include "model/layer.h"
#include "model/micro_batch.h"
#include "model/model_builder.h"
#include "model/param_table.h"
#include "model/tensor_parallel.h"

namespace baton {

// Which part of a chunk's backward to run (zero bubble, Qi et al. 2023 §2): FULL = input and
// weight gradients together; INPUT = the gradient w.r.t. the chunk's input (all collectives), the
// matmul/layernorm output gradients kept in the slot; WEIGHT = the parameter gradients from them.
enum class BackwardPass : uint8_t { FULL, INPUT, WEIGHT };

class SequentialModel {
 public:
  // `tp`: this rank's tensor-parallel group (default: none); with tp > 1 the ParamTable holds this
  // rank's shards, names and full shapes are those of the single-process model. `chunks`: the
  // global layer ranges this rank holds, ascending (empty: the whole model as one chunk). The flat
  // buffers are padded to a multiple of `flat_multiple` floats (data-parallel buckets split them
  // evenly over ranks).
  SequentialModel(std::shared_ptr<const ModelBuilder> builder, Backend& backend,
                  TensorParallel tp = {}, std::vector<LayerRange> chunks = {},
                  Recompute recompute = Recompute::NONE, size_t flat_multiple = 16);
  ~SequentialModel();
  SequentialModel(const SequentialModel&) = delete;
  SequentialModel& operator=(const SequentialModel&) = delete;

  const ModelBuilder& builder() const { return *builder_; }
  const ParamTable& table() const { return table_; }
  const TensorParallel& tp() const { return tp_; }
  Backend& backend() { return be_; }
  // fp32 master weights (the optimizer, checkpoints and the sampler's weights).
  float* params() { return params_; }
  // The weights the ops read: params() in fp32, the act-dtype copy otherwise.
  void* compute_params() { return compute_params_; }
  // After the masters changed (optimizer step, checkpoint load, init): re-derive the compute copy.
  void refresh_compute_params();
  // Weight stashing (PipeDream, 2BW): forward and backward read `compute` (a buffer laid out like
  // compute_params(), in the activation dtype: an older weight version's compute copy, see
  // train/loop/weight_versions.h) instead of compute_params(); null = compute_params() again.
  void use_params(void* compute) { active_params_ = compute; }
  // The fp32 gradients, every tensor's valid: written by a backward since zero_grads(), or zeroed
  // here (zero_grads() clears nothing: the first backward op on a tensor writes it, LayerCtx).
  float* grads() {
    finish_grads();
    return grads_;
  }
  // The same buffer without that: valid for the parameters of the layers whose backward has
  // finished since zero_grads() (backward_chunk's after_layer), as a per-layer reduction reads them.
  float* grads_of_finished_layers() { return grads_; }
  // Non-trainable buffers (ParamTable::add_buffer), fp32; null when the model has none.
  float* buffers() { return buffers_; }
  // Local layers (this rank's chunks, in order).
  int num_layers() const { return static_cast<int>(layers_.size()); }
  Layer& layer(int i) { return *layers_[i]; }
  int global_layer(int local) const { return global_of_[local]; }
  int num_chunks() const { return static_cast<int>(chunks_.size()); }
  const std::vector<LayerRange>& chunks() const { return chunks_; }
  bool holds_first() const { return chunks_.front().begin == 0; }
  bool holds_last() const { return chunks_.back().end == builder_->num_layers(); }
  bool is_whole_model() const { return chunks_.size() == 1 && holds_first() && holds_last(); }
  // Parameters this rank holds that another pipeline stage also holds (tied layers split over
  // stages): their gradients are summed over the tied group. ascending.
  const std::vector<int>& shared_params() const { return shared_; }
  // Whether this rank's copy of parameter i is the one that counts (grad norm, checkpoints): every
  // parameter that is not shared, and a shared one on the stage of its lowest tied layer.
  bool owns_param(int i) const { return owned_[i]; }

  // Initialisation from the ParamTable's init specs. Each parameter draws from its own stream
  // seeded by (seed, name), so the weights do not depend on the order or sharding of parameters.
  void init_weights(uint64_t seed);
  // Starts a new gradient sum: every tensor's gradient counts as unwritten (no pass over memory).
  void zero_grads();
  // Sums, across the tensor-parallel group, the partial gradients that sequence parallelism leaves
  // on each rank (layernorm parameters) of local `layer`. Call once per update, after the layer's
  // last backward and before its gradients are reduced over data-parallel ranks.
  void reduce_sequence_parallel_grads(int layer);

  // Allocates `slots` activation slots for micro-batches of up to B x T (T <= the builder's
  // max_positions()) and the shared scratch. Call again to change the shape; allocation happens
  // only when it grows. `split_backward`: also keep, per slot, what the deferred weight part of a
  // split backward needs (Layer::deferred_bytes; zero bubble's BWD_INPUT / BWD_WEIGHT).
  void reserve(int B, int T, int slots, bool split_backward = false);
  int num_slots() const { return static_cast<int>(slots_.size()); }
  // Bytes of every activation buffer (slots, boundary buffers, scratch): the peak activation
  // memory of training with this many slots.
  size_t activation_bytes() const { return act_bytes_; }
  DType act_dtype() const { return be_.act_dtype(); }
  Recompute recompute() const { return recompute_; }

  // ---- micro-batches ----
  // Copies the micro-batch into `slot`: its inputs when `inputs` (the chunk with the first layer
  // reads them) and its targets when `targets` and it has any (the chunk with the loss layer).
  // Sets the slot's shape either way.
  void load(int slot, const MicroBatch& mb, bool inputs, bool targets);
  // The shape and origin (MicroBatch::batch, row) of the micro-batch in `slot`, for a chunk that
  // loads nothing (a middle stage's).
  void set_shape(int slot, int B, int T, int64_t batch = 0, int row = 0);
  // The run's seed for draws keyed by sample (dropout masks; LayerCtx::batch_seed).
  void set_seed(uint64_t seed) { seed_ = seed; }
  // Forward of chunk `chunk` on `slot`: input from slot_input(slot) (or the micro-batch's inputs
  // for the first chunk), output at chunk_output(). With the loss layer and targets, the
  // micro-batch's loss sum is added to the model's device accumulator (no synchronisation): read
  // it with take_loss_sum(). Training: the loss layer also prepares its gradient, scaled by
  // `loss_scale` (d total loss / d one loss term).
  void forward_chunk(int chunk, int slot, bool training, float loss_scale);
  // The per-term losses summed since the last call (in double, in micro-batch order), and reset.
  double take_loss_sum();
  // The builder's metrics (ModelBuilder::metric_names) summed over the samples of the forwards
  // with targets and training = false since the last call, and reset.
  std::vector<double> take_metric_sums();
  // Backward of chunk `chunk` on `slot`: output gradient from slot_output_grad(slot) (unused by
  // the loss chunk), input gradient to slot_input_grad(slot) (not computed for the first chunk).
  // Accumulates into grads(). `after_layer(l)`, if given, runs when local layer l's parameter
  // gradients are done (layers finish in descending order).
  // `pass` (zero bubble): INPUT computes the input gradient and keeps what the weight part needs in
  // the slot (reserve(..., split_backward = true)); WEIGHT, run later on the same slot (whose saved
  // activations, input and inputs are untouched in between), accumulates the parameter gradients
  // (after_layer runs there). INPUT then WEIGHT accumulates exactly FULL's gradients, bit for bit.
  // Recomputed layers run their whole backward in INPUT (their activations live in shared scratch
  // only during the call).
  void backward_chunk(int chunk, int slot, const std::function<void(int)>& after_layer = {},
                      BackwardPass pass = BackwardPass::FULL);
  // Elements (of act_dtype()) of chunk `chunk`'s input and output for the slot's micro-batch
  // shape B x T (0 for the input of the first chunk and the output of the loss chunk).
  size_t chunk_input_count(int chunk, int B, int T) const;
  size_t chunk_output_count(int chunk, int B, int T) const;
  void* slot_input(int slot) { return slots_[slot].input; }
  void* slot_output_grad(int slot) { return slots_[slot].dout; }
  void* slot_input_grad(int slot) { return slots_[slot].din; }
  void* chunk_output(int chunk, int slot);
  // Saved activations of local layer `layer` for the micro-batch in `slot` (e.g. a loss layer's
  // logits for sampling).
  void* layer_saved(int slot, int layer);
  int slot_B(int slot) const { return slots_[slot].B; }
  int slot_T(int slot) const { return slots_[slot].T; }

  // ---- whole model (is_whole_model()) ----
  // load + forward_chunk + take_loss_sum: the loss sum of one micro-batch (0 without targets).
  double forward(int slot, const MicroBatch& mb, bool training, float loss_scale);
  void backward(int slot, const std::function<void(int)>& after_layer = {});

  // The local layer whose backward completes each parameter's gradient.
  const std::vector<int>& layer_of_param() const { return layer_of_param_; }
  size_t flat_size() const { return flat_size_; }

 private:
  struct Slot {
    char* saved = nullptr;  // the chunk's saved activations, layer after layer
    void* input = nullptr;  // received chunk input
    void* dout = nullptr;   // received gradient of the chunk output
    void* din = nullptr;    // gradient of the chunk input (sent)
    char* deferred = nullptr;  // split backward: what the weight part needs, layer after layer
    int32_t* tokens = nullptr;
    float* images = nullptr;
    int32_t* targets = nullptr;
    std::vector<int32_t> tokens_host;  // the same tokens on the host (embedding backward)
    int B = 0, T = 0;
    int64_t batch = 0;  // MicroBatch::batch, row
    int row = 0;
    bool has_targets = false;
  };
  LayerCtx ctx_for(const Slot& s, bool training, float loss_scale) const;
  // Zeroes the still-unwritten gradients of local layer l (after its backward: a layer whose ops
  // skipped a parameter leaves it zero, as a cleared buffer would have), or of every layer.
  void finish_layer_grads(int l);
  void finish_grads();
  void* layer_saved(const Slot& s, int layer) const;
  // Output of local layer `layer` for the micro-batch in `s` (inside saved, or the compact copy
  // kept under full recomputation).
  void* layer_out(const Slot& s, int layer) const;
  bool recomputes(int layer) const { return recompute_ == Recompute::FULL && recomputable_[layer]; }
  bool is_loss_chunk(int chunk) const { return chunks_[chunk].end == builder_->num_layers(); }
  void free_activations();

  std::shared_ptr<const ModelBuilder> builder_;
  Backend& be_;
  TensorParallel tp_;  // before layers_: they keep a reference
  std::vector<LayerRange> chunks_;
  std::vector<int> chunk_first_;  // local index of each chunk's first layer (+ one past the end)
  Recompute recompute_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<int> global_of_;
  std::vector<bool> recomputable_;
  ParamTable table_;
  std::vector<int> layer_of_param_;
  std::vector<std::vector<int>> params_of_layer_;
  // LayerCtx::grad_unwritten: written through the contexts of const calls (ctx_for).
  mutable std::vector<uint8_t> grad_unwritten_;
  std::vector<int> shared_;
  std::vector<bool> owned_;
  size_t flat_size_ = 0;
  float* params_ = nullptr;
  void* compute_params_ = nullptr;  // == params_ in fp32
  void* active_params_ = nullptr;  // use_params(); null = compute_params_
  float* grads_ = nullptr;
  float* buffers_ = nullptr;
  std::vector<Slot> slots_;
  std::vector<size_t> layer_offsets_;     // byte offset of each layer's saved block inside a slot
  std::vector<size_t> deferred_offsets_;  // byte offset of each layer's deferred block
  bool split_ = false;
  void* workspace_ = nullptr;
  void* recompute_buf_ = nullptr;      // one layer's full saved activations (FULL recompute)
  void* dbuf_[2] = {nullptr, nullptr};  // ping-pong gradients between layers
  size_t act_bytes_ = 0;
  int cap_B_ = 0, cap_T_ = 0;
  double* loss_acc_ = nullptr;  // device accumulators: forward_chunk's loss sum, then each metric's
  int n_metrics_ = 0;
  uint64_t seed_ = 0;
};

}  // namespace baton
