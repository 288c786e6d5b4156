#include "model/gpt_model.h"

#include <algorithm>

#include "core/error.h"
#include "core/rng.h"
#include "model/embedding.h"
#include "model/lm_head.h"
#include "model/transformer_block.h"

namespace baton {

GptModel::GptModel(const GptDims& dims, Backend& backend, TensorParallel tp, size_t flat_multiple)
    : dims_(dims), be_(backend), tp_(tp) {
  BATON_ASSERT(dims.d_model % dims.n_head == 0, "n_head must divide d_model");
  BATON_ASSERT(dims.n_head % tp.size == 0 && dims.vocab_padded % tp.size == 0,
               "tp={} must divide n_head={} and the padded vocabulary {}", tp.size, dims.n_head,
               dims.vocab_padded);
  BATON_ASSERT(!tp.active() || tp.comm != nullptr, "tensor parallelism without a communicator");
  layers_.push_back(std::make_unique<Embedding>(dims, tp_));
  for (int l = 0; l < dims.n_layer; ++l)
    layers_.push_back(std::make_unique<TransformerBlock>(dims, l, tp_));
  layers_.push_back(std::make_unique<LmHead>(dims, tp_));
  for (int l = 0; l < num_layers(); ++l) {
    layers_[l]->add_params(table_);
    layer_of_param_.resize(table_.size(), l);
  }
  flat_size_ = (table_.total() + flat_multiple - 1) / flat_multiple * flat_multiple;
  params_ = static_cast<float*>(be_.alloc(flat_size_ * sizeof(float)));
  grads_ = static_cast<float*>(be_.alloc(flat_size_ * sizeof(float)));
}

GptModel::~GptModel() {
  free_activations();
  be_.release(params_);
  be_.release(grads_);
}

void GptModel::free_activations() {
  for (Slot& s : slots_) {
    be_.release(s.saved);
    be_.release(s.tokens);
    be_.release(s.targets);
  }
  slots_.clear();
  be_.release(workspace_);
  be_.release(dbuf_[0]);
  be_.release(dbuf_[1]);
  workspace_ = dbuf_[0] = dbuf_[1] = nullptr;
  act_floats_ = 0;
}

void GptModel::init_weights(uint64_t seed) {
  std::vector<float> host(table_.total(), 0.0f), full;
  for (int i = 0; i < table_.size(); ++i) {
    const ParamSpec& spec = table_.spec(i);
    float* p = table_.at(host.data(), i);
    const size_t n = table_.numel(i);
    switch (spec.init) {
      case ParamSpec::Init::ZEROS: std::fill(p, p + n, 0.0f); break;
      case ParamSpec::Init::ONES: std::fill(p, p + n, 1.0f); break;
      case ParamSpec::Init::NORMAL: {
        // Draw the full logical tensor and keep this rank's shard: every layout starts from the
        // single-process model's weights.
        full.resize(n * (spec.tp_dim >= 0 ? tp_.size : 1));
        Rng rng(mix({seed, hash_string(spec.name)}));
        for (float& x : full) x = spec.init_std * rng.normal();
        extract_shard(spec, tp_.rank, tp_.size, full.data(), p);
        break;
      }
    }
  }
  be_.to_device(params_, host.data(), host.size() * sizeof(float));
}

void GptModel::zero_grads() { be_.zero(grads_, flat_size_); }

void GptModel::reduce_sequence_parallel_grads(int layer) {
  if (!tp_.sp()) return;
  for (int i = 0; i < table_.size(); ++i)
    if (table_.spec(i).sp_partial && layer_of_param_[i] == layer)
      tp_.all_reduce_sum(table_.at(grads_, i), table_.numel(i));
}

double GptModel::grad_sumsq_share() {
  double s = 0;
  for (int i = 0; i < table_.size(); ++i)
    if (table_.spec(i).tp_dim >= 0 || tp_.rank == 0)
      s += be_.sum_squares(table_.at(grads_, i), table_.numel(i));
  return s;
}

void GptModel::reserve(int B, int T, int slots) {
  BATON_ASSERT(T <= dims_.seq_len, "sequence of {} tokens exceeds seq_len {}", T, dims_.seq_len);
  if (B <= cap_B_ && T <= cap_T_ && slots <= static_cast<int>(slots_.size())) return;
  B = std::max(B, cap_B_);
  T = std::max(T, cap_T_);
  slots = std::max(slots, static_cast<int>(slots_.size()));
  free_activations();
  layer_offsets_.clear();
  size_t per_slot = 0, ws = 0, io = 0;
  for (auto& layer : layers_) {
    layer_offsets_.push_back(per_slot);
    per_slot += (layer->saved_floats(B, T) + 15) / 16 * 16;
    ws = std::max(ws, layer->workspace_floats(B, T));
    io = std::max(io, layer->output_floats(B, T));
  }
  for (int i = 0; i < slots; ++i) {
    Slot s;
    s.saved = static_cast<float*>(be_.alloc(per_slot * sizeof(float)));
    s.tokens = static_cast<int32_t*>(be_.alloc(size_t(B) * T * sizeof(int32_t)));
    s.targets = static_cast<int32_t*>(be_.alloc(size_t(B) * T * sizeof(int32_t)));
    slots_.push_back(s);
  }
  workspace_ = static_cast<float*>(be_.alloc(std::max<size_t>(ws, 1) * sizeof(float)));
  dbuf_[0] = static_cast<float*>(be_.alloc(io * sizeof(float)));
  dbuf_[1] = static_cast<float*>(be_.alloc(io * sizeof(float)));
  act_floats_ = per_slot * slots + ws + 2 * io;
  cap_B_ = B;
  cap_T_ = T;
}

float* GptModel::layer_saved(const Slot& s, int layer) const { return s.saved + layer_offsets_[layer]; }

LayerCtx GptModel::ctx_for(const Slot& s, bool training, float dloss) const {
  LayerCtx c;
  c.be = &be_;
  c.table = &table_;
  c.params = params_;
  c.grads = grads_;
  c.workspace = workspace_;
  c.B = s.B;
  c.T = s.T;
  c.tokens = s.tokens;
  c.targets = s.has_targets ? s.targets : nullptr;
  c.training = training;
  c.dloss = dloss;
  return c;
}

double GptModel::forward(int slot, const int32_t* tokens, const int32_t* targets, int B, int T,
                         bool training, float dloss) {
  BATON_ASSERT(slot >= 0 && slot < static_cast<int>(slots_.size()), "slot {} not reserved", slot);
  BATON_ASSERT(B <= cap_B_ && T <= cap_T_, "micro-batch {}x{} exceeds reserved {}x{}", B, T, cap_B_, cap_T_);
  Slot& s = slots_[slot];
  s.B = B;
  s.T = T;
  s.has_targets = targets != nullptr;
  be_.to_device(s.tokens, tokens, size_t(B) * T * sizeof(int32_t));
  if (targets) be_.to_device(s.targets, targets, size_t(B) * T * sizeof(int32_t));
  LayerCtx ctx = ctx_for(s, training, dloss);
  const float* in = nullptr;
  for (int l = 0; l < num_layers(); ++l) {
    float* saved = layer_saved(s, l);
    layers_[l]->forward(ctx, in, saved);
    in = layers_[l]->output(saved, B, T);
  }
  if (!targets) return 0.0;
  loss_host_.resize(size_t(B) * T);
  be_.to_host(loss_host_.data(), in, loss_host_.size() * sizeof(float));
  double sum = 0;
  for (float x : loss_host_) sum += x;
  return sum;
}

void GptModel::backward(int slot, const std::function<void(int)>& after_layer) {
  Slot& s = slots_[slot];
  BATON_ASSERT(s.has_targets, "backward of slot {} without targets", slot);
  LayerCtx ctx = ctx_for(s, true, 0.0f);
  const float* dout = nullptr;
  for (int l = num_layers() - 1; l >= 0; --l) {
    const float* in = l > 0 ? layers_[l - 1]->output(layer_saved(s, l - 1), s.B, s.T) : nullptr;
    float* din = l > 0 ? dbuf_[l % 2] : nullptr;
    layers_[l]->backward(ctx, in, dout, din, layer_saved(s, l));
    if (after_layer) after_layer(l);
    dout = din;
  }
}

const float* GptModel::logits(int slot) const {
  BATON_ASSERT(!tp_.active(), "full logits are not available under tensor parallelism");
  const Slot& s = slots_[slot];
  auto* head = static_cast<const LmHead*>(layers_.back().get());
  return head->logits(const_cast<float*>(layer_saved(s, num_layers() - 1)), s.B, s.T);
}

}  // namespace baton
