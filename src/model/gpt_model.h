// GPT-2 (learned positions, pre-LayerNorm blocks, 4x GELU MLP, LM head tied to the token
// embedding, vocabulary padded to a multiple of 128) as a list of global layers:
//   [Embedding, TransformerBlock x L, LmHead]        (global layer g: 0, 1..L, L + 1)
// A GptModel holds the layers of this rank's model chunks only — one chunk [0, L + 2) without
// pipelining; with pipeline parallelism the chunks of pipeline_chunks() (Megatron's split, PTD-P
// notes-dissertation §1.6 / §3: the L blocks divided evenly over pp·vp model stages, the embedding
// on model stage 0 and the head on the last). Parameter names stay global ("h.7.attn...") so
// checkpoints load under any layout. The tied wte: a rank with the head but not the embedding holds
// its own copy (lm_head.cpp), initialised identically (init is a pure function of (seed, name));
// the trainer sums the two copies' gradients over the embedding group (Megatron).
//
// Parameters and gradients are one flat buffer each, laid out by the ParamTable in local layer
// order: fp32 master weights and fp32 gradients. Ops read the compute weights — the masters
// themselves when the backend computes in fp32, else a flat copy in the backend's act dtype (bf16)
// refreshed from the masters by refresh_compute_params() after every change to them. Activations are kept in `slots`: one slot holds one (chunk, micro-batch) from its forward
// to its backward, plus the chunk's boundary buffers (received input, received output gradient,
// computed input gradient), so a pipeline schedule can keep several micro-batches in flight and
// an executor can receive into and send from them.
//
// Activation recomputation (PTD-P notes-dissertation §3, Korthikanti et al.): FULL keeps only each
// transformer block's output (= the next block's input) and re-runs the block's forward right
// before its backward; SELECTIVE keeps everything except the attention probabilities [B,NH,T,T],
// recomputed from the saved qkv in backward (transformer_block.h). Embedding and head keep their
// activations (as Megatron). Losses and gradients are identical to no recomputation.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/gpt_dims.h"
#include "model/layer.h"
#include "model/param_table.h"
#include "model/tensor_parallel.h"

namespace baton {

// Global layers [begin, end) of one model chunk.
struct LayerRange {
  int begin = 0, end = 0;
  bool operator==(const LayerRange&) const = default;
};

enum class Recompute : uint8_t { NONE, SELECTIVE, FULL };

// Which part of a chunk's backward to run (zero bubble, Qi et al. 2023 §2): FULL = input and
// weight gradients together; INPUT = the gradient w.r.t. the chunk's input (all collectives), the
// matmul/layernorm output gradients kept in the slot; WEIGHT = the parameter gradients from them.
enum class BackwardPass : uint8_t { FULL, INPUT, WEIGHT };
// "none" | "selective" | "full" (config parallel.recompute).
Recompute parse_recompute(const std::string& s);

// The chunks of pipeline rank `pp_rank` (ascending): model stage s = c·pp + pp_rank holds blocks
// [s·k, (s + 1)·k) with k = n_layer / (pp·vp), plus the embedding on stage 0 and the head on
// stage pp·vp − 1. Throws Error (with hint) when pp·vp does not divide n_layer.
std::vector<LayerRange> pipeline_chunks(int n_layer, int pp, int vp, int pp_rank);

class GptModel {
 public:
  // `tp` describes this rank's tensor-parallel group (default: none). With tp > 1 the ParamTable
  // holds this rank's shards; names and full shapes are those of the single-process model.
  // The flat buffers are padded to a multiple of `flat_multiple` floats (data-parallel buckets
  // split them evenly over ranks). `chunks`: the global layer ranges this rank holds (empty: the
  // whole model as one chunk).
  GptModel(const GptDims& dims, Backend& backend, TensorParallel tp = {}, size_t flat_multiple = 16,
           std::vector<LayerRange> chunks = {}, Recompute recompute = Recompute::NONE);
  ~GptModel();
  GptModel(const GptModel&) = delete;
  GptModel& operator=(const GptModel&) = delete;

  const GptDims& dims() const { return dims_; }
  const ParamTable& table() const { return table_; }
  const TensorParallel& tp() const { return tp_; }
  Backend& backend() { return be_; }
  // fp32 master weights (the optimizer, checkpoints and the sampler's weights).
  float* params() { return params_; }
  // The weights the ops read: params() in fp32, the act-dtype copy otherwise.
  void* compute_params() { return compute_params_; }
  // After the masters changed (optimizer step, checkpoint load, init): re-derive the compute copy.
  void refresh_compute_params();
  // Weight stashing (PipeDream, 2BW): forward and backward read `p` (a buffer laid out like
  // params(), e.g. an older weight version) instead of params(); null = params() again. fp32
  // compute only (the session refuses weight stashing with bf16).
  void use_params(float* p) { active_params_ = p; }
  float* grads() { return grads_; }
  // Local layers (this rank's chunks, in order).
  int num_layers() const { return static_cast<int>(layers_.size()); }
  Layer& layer(int i) { return *layers_[i]; }
  int num_chunks() const { return static_cast<int>(chunks_.size()); }
  const std::vector<LayerRange>& chunks() const { return chunks_; }
  bool has_embedding() const { return chunks_.front().begin == 0; }
  bool has_head() const { return chunks_.back().end == dims_.n_layer + 2; }
  bool is_whole_model() const { return chunks_.size() == 1 && has_embedding() && has_head(); }
  // The tied token table "wte" when this rank holds a copy that another rank also holds (the
  // embedding's on the first pipeline stage, the head's on the last); -1 otherwise.
  int tied_wte_param() const;

  // GPT-2 initialisation from the ParamTable's init specs. Each parameter draws from its own stream
  // seeded by (seed, name), so the weights do not depend on the order or sharding of parameters.
  void init_weights(uint64_t seed);
  void zero_grads();
  // Sums, across the tensor-parallel group, the partial gradients that sequence parallelism leaves
  // on each rank (layernorm parameters) of local `layer`. Call once per step, after the layer's
  // last backward and before its gradients are reduced over data-parallel ranks.
  void reduce_sequence_parallel_grads(int layer);
  // This rank's share of the squared global gradient norm: tensor-parallel shards count on every
  // rank, replicated parameters on tensor-parallel rank 0 only, so that the sum over the
  // tensor-parallel group is the norm of the full model's gradient.
  double grad_sumsq_share();

  // Allocates `slots` activation slots for micro-batches of up to B x T (T <= seq_len) and the
  // shared scratch. Call again to change the shape; allocation happens only when it grows.
  // `split_backward`: also keep, per slot, what the deferred weight part of a split backward
  // needs (Layer::deferred_bytes; zero bubble's BWD_INPUT / BWD_WEIGHT).
  void reserve(int B, int T, int slots, bool split_backward = false);
  int num_slots() const { return static_cast<int>(slots_.size()); }
  // Bytes of every activation buffer (slots, boundary buffers, scratch): the peak activation
  // memory of training with this many slots.
  size_t activation_bytes() const { return act_bytes_; }
  // The dtype of activations and of the chunk boundary buffers (the backend's).
  DType act_dtype() const { return be_.act_dtype(); }
  Recompute recompute() const { return recompute_; }

  // ---- whole model (is_whole_model()) ----
  // Forward of one micro-batch into `slot`. tokens/targets are host arrays [B,T]; targets may be
  // null (logits only). In training mode the logits are turned into their gradient scaled by
  // `dloss`. Returns the sum of per-token losses (0 without targets), i.e. take_loss_sum() — a
  // device synchronisation; a training loop calls set_batch + forward_chunk per micro-batch and
  // take_loss_sum once per step instead.
  double forward(int slot, const int32_t* tokens, const int32_t* targets, int B, int T,
                 bool training, float dloss);
  // Backward of the micro-batch in `slot`; accumulates into grads(). `after_layer(l)`, if given,
  // runs when layer l's backward is done (layers finish in descending order).
  void backward(int slot, const std::function<void(int)>& after_layer = {});

  // ---- one chunk (pipeline executor) ----
  // The micro-batch of `slot`: shape, and the tokens (needed by the chunk with the embedding) and
  // targets (the chunk with the head); either may be null.
  void set_batch(int slot, const int32_t* tokens, const int32_t* targets, int B, int T);
  // Forward of chunk `chunk` on `slot`: input from slot_input(slot) (or the tokens for the
  // embedding chunk), output at chunk_output(). When the chunk has the head and the slot has
  // targets, the micro-batch's loss sum is added to the model's device accumulator (no
  // synchronisation): read it with take_loss_sum().
  void forward_chunk(int chunk, int slot, bool training, float dloss);
  // The per-token losses summed since the last call (in double, in micro-batch order), and reset.
  double take_loss_sum();
  // Backward of chunk `chunk` on `slot`: output gradient from slot_output_grad(slot) (unused by
  // the head chunk), input gradient to slot_input_grad(slot) (not computed for the embedding
  // chunk). Accumulates into grads().
  // `pass` (zero bubble): INPUT computes the input gradient and keeps what the weight part needs in
  // the slot (reserve(..., split_backward = true)); WEIGHT, run later on the same slot (whose saved
  // activations, input and tokens are untouched in between), accumulates the parameter gradients
  // (after_layer runs there). INPUT then WEIGHT accumulates exactly FULL's gradients, bit for bit.
  // Blocks under full recomputation run their whole backward in INPUT (their activations live in
  // shared scratch only during the call).
  void backward_chunk(int chunk, int slot, const std::function<void(int)>& after_layer = {},
                      BackwardPass pass = BackwardPass::FULL);
  // Elements (of act_dtype()) crossing a chunk boundary for a B x T micro-batch: [local_rows(B·T), C].
  size_t boundary_count(int B, int T) const;
  void* slot_input(int slot) { return slots_[slot].input; }
  void* slot_output_grad(int slot) { return slots_[slot].dout; }
  void* slot_input_grad(int slot) { return slots_[slot].din; }
  void* chunk_output(int chunk, int slot);

  // The local layer whose backward completes each parameter's gradient (the tied wte: the
  // embedding when this rank has it).
  const std::vector<int>& layer_of_param() const { return layer_of_param_; }
  size_t flat_size() const { return flat_size_; }
  // Logits [B*T, Vp] of `slot` after a forward without targets, in act_dtype() (backend memory).
  const void* logits(int slot) const;
  // Row `row` of those logits as fp32 on the host.
  void logits_row_to_host(int slot, int row, float* dst);

 private:
  struct Slot {
    char* saved = nullptr;  // the chunk's saved activations, layer after layer
    void* input = nullptr;  // received chunk input [Nl,C]
    void* dout = nullptr;   // received gradient of the chunk output [Nl,C]
    void* din = nullptr;    // gradient of the chunk input [Nl,C] (sent)
    char* deferred = nullptr;  // split backward: what the weight part needs, layer after layer
    int32_t* tokens = nullptr;
    int32_t* targets = nullptr;
    std::vector<int32_t> tokens_host;  // the same tokens on the host (embedding backward)
    int B = 0, T = 0;
    bool has_targets = false;
  };
  LayerCtx ctx_for(const Slot& s, bool training, float dloss) const;
  void* layer_saved(const Slot& s, int layer) const;
  // Output of local layer `layer` for the micro-batch in `s` (inside saved, or the compact copy
  // kept under full recomputation).
  void* layer_out(const Slot& s, int layer) const;
  bool recomputes(int layer) const;  // full recomputation of this (transformer block) layer
  void free_activations();

  GptDims dims_;
  Backend& be_;
  TensorParallel tp_;  // before layers_: they keep a reference
  std::vector<LayerRange> chunks_;
  std::vector<int> chunk_first_;  // local index of each chunk's first layer (+ one past the end)
  Recompute recompute_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<bool> is_block_;
  ParamTable table_;
  std::vector<int> layer_of_param_;
  size_t flat_size_ = 0;
  float* params_ = nullptr;
  void* compute_params_ = nullptr;  // == params_ in fp32
  float* active_params_ = nullptr;  // use_params(); null = compute_params_
  float* grads_ = nullptr;
  std::vector<Slot> slots_;
  std::vector<size_t> layer_offsets_;  // byte offset of each layer's saved block inside a slot
  std::vector<size_t> deferred_offsets_;  // byte offset of each layer's deferred block
  bool split_ = false;
  void* workspace_ = nullptr;
  void* recompute_buf_ = nullptr;      // one block's full saved activations (FULL recompute)
  void* dbuf_[2] = {nullptr, nullptr};  // ping-pong gradients between layers
  size_t act_bytes_ = 0;
  int cap_B_ = 0, cap_T_ = 0;
  double* loss_acc_ = nullptr;  // device accumulator of forward_chunk's loss sums
};

}  // namespace baton
