// SequentialModel: the generic layer stack; see sequential_model.h.
#include "model/sequential_model.h"

#include <algorithm>

#include "core/error.h"
#include "core/rng.h"

namespace baton {

Recompute parse_recompute(const std::string& s) {
  if (s == "none") return Recompute::NONE;
  if (s == "selective") return Recompute::SELECTIVE;
  if (s == "full") return Recompute::FULL;
  throw Error(fmt::format("unknown recompute mode \"{}\"", s),
              "use parallel.recompute = \"none\", \"selective\" or \"full\"");
}

SequentialModel::SequentialModel(std::shared_ptr<const ModelBuilder> builder, Backend& backend,
                                 TensorParallel tp, std::vector<LayerRange> chunks,
                                 Recompute recompute, size_t flat_multiple)
    : builder_(std::move(builder)), be_(backend), tp_(tp), chunks_(std::move(chunks)),
      recompute_(recompute) {
  tp_.act = be_.act_dtype();
  BATON_ASSERT(!tp.active() || tp.comm != nullptr, "tensor parallelism without a communicator");
  const int global_layers = builder_->num_layers();
  if (chunks_.empty()) chunks_.push_back({0, global_layers});
  int prev_end = 0;
  for (const LayerRange& c : chunks_) {
    BATON_ASSERT(c.begin >= prev_end && c.begin < c.end && c.end <= global_layers,
                 "bad model chunk [{}, {}) of {} global layers", c.begin, c.end, global_layers);
    prev_end = c.end;
    chunk_first_.push_back(num_layers());
    for (int g = c.begin; g < c.end; ++g) {
      layers_.push_back(builder_->make_layer(g, tp_, be_, recompute));
      global_of_.push_back(g);
      recomputable_.push_back(layers_.back()->recomputable());
    }
  }
  chunk_first_.push_back(num_layers());
  params_of_layer_.resize(num_layers());
  for (int l = 0; l < num_layers(); ++l) {
    const int first = table_.size();
    layers_[l]->add_params(table_);
    layer_of_param_.resize(table_.size(), l);
    for (int i = first; i < table_.size(); ++i) params_of_layer_[l].push_back(i);
  }
  grad_unwritten_.assign(table_.size(), 1);
  // Tied layers on several stages: the parameter is shared when this rank holds some but not all
  // of its layers, and owned here when it holds the lowest of them.
  owned_.assign(table_.size(), true);
  auto holds = [&](int g) {
    return std::any_of(chunks_.begin(), chunks_.end(), [g](const LayerRange& c) { return c.contains(g); });
  };
  for (const TiedLayers& t : builder_->tied_layers()) {
    const int i = table_.find(t.param);
    if (i < 0) continue;
    const bool all = std::all_of(t.layers.begin(), t.layers.end(), holds);
    if (all) continue;
    shared_.push_back(i);
    owned_[i] = holds(t.layers.front());
  }
  std::sort(shared_.begin(), shared_.end());
  flat_size_ = (table_.total() + flat_multiple - 1) / flat_multiple * flat_multiple;
  params_ = static_cast<float*>(be_.alloc(flat_size_ * sizeof(float)));
  grads_ = static_cast<float*>(be_.alloc(flat_size_ * sizeof(float)));
  be_.zero(grads_, flat_size_);  // the padding between and after tensors, which no op writes
  compute_params_ = be_.act_dtype() == DType::F32 ? params_ : be_.alloc(flat_size_ * be_.act_size());
  if (table_.buffers_total() > 0)
    buffers_ = static_cast<float*>(be_.alloc(table_.buffers_total() * sizeof(float)));
  n_metrics_ = static_cast<int>(builder_->metric_names().size());
  loss_acc_ = static_cast<double*>(be_.alloc((1 + n_metrics_) * sizeof(double)));
}

void SequentialModel::refresh_compute_params() {
  if (compute_params_ != params_)
    be_.cast(compute_params_, be_.act_dtype(), params_, DType::F32, flat_size_);
}

SequentialModel::~SequentialModel() {
  free_activations();
  if (compute_params_ != params_) be_.release(compute_params_);
  be_.release(params_);
  be_.release(grads_);
  be_.release(buffers_);
  be_.release(loss_acc_);
}

void SequentialModel::free_activations() {
  for (Slot& s : slots_) {
    for (void* p : {static_cast<void*>(s.saved), s.input, s.dout, s.din, static_cast<void*>(s.deferred),
                    static_cast<void*>(s.tokens), static_cast<void*>(s.images),
                    static_cast<void*>(s.targets)})
      be_.release(p);
  }
  slots_.clear();
  be_.release(workspace_);
  be_.release(recompute_buf_);
  be_.release(dbuf_[0]);
  be_.release(dbuf_[1]);
  workspace_ = recompute_buf_ = dbuf_[0] = dbuf_[1] = nullptr;
  act_bytes_ = 0;
}

namespace {
// A tensor's values at initialisation: constants, or a draw of the full logical tensor from its
// own (seed, name) stream of which this rank keeps its shard — every layout starts from the
// single-process model's weights (and every copy of a tied parameter is equal).
void init_tensor(const ParamSpec& spec, size_t n, uint64_t seed, const TensorParallel& tp,
                 std::vector<float>& full, float* out) {
  switch (spec.init) {
    case ParamSpec::Init::ZEROS: std::fill(out, out + n, 0.0f); break;
    case ParamSpec::Init::ONES: std::fill(out, out + n, 1.0f); break;
    case ParamSpec::Init::NORMAL:
    case ParamSpec::Init::UNIFORM: {
      full.resize(n * (spec.tp_dim >= 0 ? tp.size : 1));
      Rng rng(mix({seed, hash_string(spec.name)}));
      if (spec.init == ParamSpec::Init::NORMAL)
        for (float& x : full) x = spec.init_std * rng.normal();
      else
        for (float& x : full) x = spec.init_bound * (2.0f * rng.uniform() - 1.0f);
      extract_shard(spec, tp.rank, tp.size, full.data(), out);
      break;
    }
  }
}
}  // namespace

void SequentialModel::init_weights(uint64_t seed) {
  std::vector<float> host(table_.total(), 0.0f), full;
  for (int i = 0; i < table_.size(); ++i)
    init_tensor(table_.spec(i), table_.numel(i), seed, tp_, full, table_.at(host.data(), i));
  be_.to_device(params_, host.data(), host.size() * sizeof(float));
  refresh_compute_params();
  if (!buffers_) return;
  host.assign(table_.buffers_total(), 0.0f);
  for (int i = 0; i < table_.num_buffers(); ++i)
    init_tensor(table_.buffer_spec(i), table_.buffer_numel(i), seed, tp_, full,
                table_.buffer_at(host.data(), i));
  be_.to_device(buffers_, host.data(), host.size() * sizeof(float));
}

void SequentialModel::zero_grads() { std::fill(grad_unwritten_.begin(), grad_unwritten_.end(), uint8_t{1}); }

void SequentialModel::finish_layer_grads(int l) {
  for (int i : params_of_layer_[l])
    if (grad_unwritten_[i]) {
      be_.zero(table_.at(grads_, i), table_.numel(i));
      grad_unwritten_[i] = 0;
    }
}

void SequentialModel::finish_grads() {
  for (int l = 0; l < num_layers(); ++l) finish_layer_grads(l);
}

void SequentialModel::reduce_sequence_parallel_grads(int layer) {
  if (!tp_.sp()) return;
  for (int i = 0; i < table_.size(); ++i)
    if (table_.spec(i).sp_partial && layer_of_param_[i] == layer)
      tp_.all_reduce_sum(table_.at(grads_, i), table_.numel(i));
}

size_t SequentialModel::chunk_input_count(int chunk, int B, int T) const {
  return layers_[chunk_first_[chunk]]->input_bytes(B, T) / be_.act_size();
}

size_t SequentialModel::chunk_output_count(int chunk, int B, int T) const {
  if (is_loss_chunk(chunk)) return 0;
  return layers_[chunk_first_[chunk + 1] - 1]->output_bytes(B, T) / be_.act_size();
}

void SequentialModel::reserve(int B, int T, int slots, bool split_backward) {
  BATON_ASSERT(T <= builder_->max_positions(), "samples of {} positions exceed the model's {}", T,
               builder_->max_positions());
  if (B <= cap_B_ && T <= cap_T_ && slots <= num_slots() && (!split_backward || split_)) return;
  split_ = split_ || split_backward;
  B = std::max(B, cap_B_);
  T = std::max(T, cap_T_);
  slots = std::max(slots, num_slots());
  free_activations();
  layer_offsets_.assign(layers_.size(), 0);
  deferred_offsets_.assign(layers_.size(), 0);
  // A slot holds one chunk's activations: offsets restart at each chunk, the slot is as large as
  // the largest chunk. Boundary buffers are as large as the largest chunk input or output.
  size_t per_slot = 0, ws = 0, io = 0, rec = 0, per_slot_deferred = 0, boundary = 0;
  for (int c = 0; c < num_chunks(); ++c) {
    size_t used = 0, deferred = 0;
    for (int l = chunk_first_[c]; l < chunk_first_[c + 1]; ++l) {
      const Layer& layer = *layers_[l];
      layer_offsets_[l] = used;
      const size_t keep = recomputes(l) ? layer.output_bytes(B, T) : layer.saved_bytes(B, T);
      used += (keep + 255) / 256 * 256;
      deferred_offsets_[l] = deferred;
      if (split_ && !recomputes(l)) deferred += (layer.deferred_bytes(B, T) + 255) / 256 * 256;
      per_slot_deferred = std::max(per_slot_deferred, deferred);
      ws = std::max(ws, layer.workspace_bytes(B, T));
      io = std::max(io, layer.output_bytes(B, T));
      if (recomputes(l)) rec = std::max(rec, layer.saved_bytes(B, T));
    }
    per_slot = std::max(per_slot, used);
    if (!is_whole_model())
      boundary = std::max({boundary, chunk_input_count(c, B, T), chunk_output_count(c, B, T)});
  }
  boundary *= be_.act_size();
  const size_t inputs = holds_first() ? size_t(builder_->input_elements(B, T)) : 0;
  const size_t targets = holds_last() ? size_t(builder_->target_elements(B, T)) : 0;
  const bool tokens = builder_->input_kind() == InputKind::TOKENS;
  auto alloc = [&](size_t bytes) { return bytes ? static_cast<char*>(be_.alloc(bytes)) : nullptr; };
  for (int i = 0; i < slots; ++i) {
    Slot s;
    s.saved = alloc(per_slot);
    s.input = alloc(boundary);
    s.dout = alloc(boundary);
    s.din = alloc(boundary);
    s.deferred = alloc(per_slot_deferred);
    s.tokens = reinterpret_cast<int32_t*>(alloc(tokens ? inputs * sizeof(int32_t) : 0));
    s.images = reinterpret_cast<float*>(alloc(tokens ? 0 : inputs * sizeof(float)));
    s.targets = reinterpret_cast<int32_t*>(alloc(targets * sizeof(int32_t)));
    slots_.push_back(std::move(s));
  }
  workspace_ = alloc(std::max<size_t>(ws, 1));
  recompute_buf_ = alloc(rec);
  dbuf_[0] = alloc(io);
  dbuf_[1] = alloc(io);
  act_bytes_ = (per_slot + per_slot_deferred + 3 * boundary) * slots + ws + rec + 2 * io;
  cap_B_ = B;
  cap_T_ = T;
}

void* SequentialModel::layer_saved(const Slot& s, int layer) const {
  return s.saved + layer_offsets_[layer];
}

void* SequentialModel::layer_saved(int slot, int layer) { return layer_saved(slots_[slot], layer); }

void* SequentialModel::layer_out(const Slot& s, int layer) const {
  void* saved = layer_saved(s, layer);
  return recomputes(layer) ? saved : layers_[layer]->output(saved, s.B, s.T);
}

LayerCtx SequentialModel::ctx_for(const Slot& s, bool training, float loss_scale) const {
  LayerCtx c;
  c.be = &be_;
  c.table = &table_;
  c.params = active_params_ ? active_params_ : compute_params_;
  c.grads = grads_;
  c.grad_unwritten = grad_unwritten_.data();
  c.buffers = buffers_;
  c.workspace = workspace_;
  c.B = s.B;
  c.T = s.T;
  c.tokens = s.tokens;
  c.tokens_host = s.tokens_host.empty() ? nullptr : s.tokens_host.data();
  c.images = s.images;
  c.targets = s.has_targets ? s.targets : nullptr;
  c.training = training;
  c.loss_scale = loss_scale;
  c.batch_seed = mix({seed_, static_cast<uint64_t>(s.batch)});
  c.row0 = s.row;
  return c;
}

void SequentialModel::load(int slot, const MicroBatch& mb, bool inputs, bool targets) {
  BATON_ASSERT(slot >= 0 && slot < num_slots(), "slot {} not reserved", slot);
  BATON_ASSERT(mb.B <= cap_B_ && mb.T <= cap_T_, "micro-batch {}x{} exceeds reserved {}x{}", mb.B,
               mb.T, cap_B_, cap_T_);
  Slot& s = slots_[slot];
  s.B = mb.B;
  s.T = mb.T;
  s.batch = mb.batch;
  s.row = mb.row;
  s.has_targets = targets && mb.targets != nullptr;
  if (inputs) {
    BATON_ASSERT(holds_first(), "inputs loaded on a rank without the first layer");
    const size_t n = size_t(builder_->input_elements(mb.B, mb.T));
    if (builder_->input_kind() == InputKind::TOKENS) {
      BATON_ASSERT(mb.tokens, "a token model's micro-batch without tokens");
      be_.to_device(s.tokens, mb.tokens, n * sizeof(int32_t));
      s.tokens_host.assign(mb.tokens, mb.tokens + n);
    } else {
      BATON_ASSERT(mb.images, "an image model's micro-batch without images");
      be_.to_device(s.images, mb.images, n * sizeof(float));
    }
  }
  if (s.has_targets) {
    BATON_ASSERT(holds_last(), "targets loaded on a rank without the loss layer");
    be_.to_device(s.targets, mb.targets, size_t(builder_->target_elements(mb.B, mb.T)) * sizeof(int32_t));
  }
}

void SequentialModel::set_shape(int slot, int B, int T, int64_t batch, int row) {
  BATON_ASSERT(slot >= 0 && slot < num_slots(), "slot {} not reserved", slot);
  BATON_ASSERT(B <= cap_B_ && T <= cap_T_, "micro-batch {}x{} exceeds reserved {}x{}", B, T, cap_B_, cap_T_);
  Slot& s = slots_[slot];
  s.B = B;
  s.T = T;
  s.batch = batch;
  s.row = row;
}

void* SequentialModel::chunk_output(int chunk, int slot) {
  return layer_out(slots_[slot], chunk_first_[chunk + 1] - 1);
}

void SequentialModel::forward_chunk(int chunk, int slot, bool training, float loss_scale) {
  BATON_ASSERT(chunk >= 0 && chunk < num_chunks(), "chunk {} of {}", chunk, num_chunks());
  Slot& s = slots_[slot];
  LayerCtx ctx = ctx_for(s, training, loss_scale);
  const int first = chunk_first_[chunk], last = chunk_first_[chunk + 1] - 1;
  const void* in = chunks_[chunk].begin == 0 ? nullptr : s.input;
  for (int l = first; l <= last; ++l) {
    void* saved = layer_saved(s, l);
    if (recomputes(l)) {
      // Full recomputation: run in scratch, keep only the output (the next layer's input).
      layers_[l]->forward(ctx, in, recompute_buf_);
      be_.copy_bytes(saved, layers_[l]->output(recompute_buf_, s.B, s.T),
                     layers_[l]->output_bytes(s.B, s.T));
    } else {
      layers_[l]->forward(ctx, in, saved);
    }
    in = layer_out(s, l);
  }
  if (!is_loss_chunk(chunk) || !s.has_targets) return;
  be_.accumulate_sum(loss_acc_, static_cast<const float*>(in), size_t(layers_[last]->loss_terms(s.B, s.T)));
  if (training) return;  // metrics are evaluation's
  for (int m = 0; m < n_metrics_; ++m)
    be_.accumulate_sum(loss_acc_ + 1 + m, layers_[last]->metric(layer_saved(s, last), s.B, s.T, m), size_t(s.B));
}

double SequentialModel::take_loss_sum() {
  double sum = 0;
  be_.to_host(&sum, loss_acc_, sizeof(double));
  be_.zero_bytes(loss_acc_, sizeof(double));
  return sum;
}

std::vector<double> SequentialModel::take_metric_sums() {
  std::vector<double> sums(n_metrics_);
  if (n_metrics_ == 0) return sums;
  be_.to_host(sums.data(), loss_acc_ + 1, n_metrics_ * sizeof(double));
  be_.zero_bytes(loss_acc_ + 1, n_metrics_ * sizeof(double));
  return sums;
}

void SequentialModel::backward_chunk(int chunk, int slot, const std::function<void(int)>& after_layer,
                                     BackwardPass pass) {
  BATON_ASSERT(chunk >= 0 && chunk < num_chunks(), "chunk {} of {}", chunk, num_chunks());
  BATON_ASSERT(pass == BackwardPass::FULL || split_,
               "split backward without reserve(..., split_backward = true)");
  Slot& s = slots_[slot];
  const bool loss = is_loss_chunk(chunk);
  BATON_ASSERT(!loss || s.has_targets, "backward of slot {} without targets", slot);
  LayerCtx ctx = ctx_for(s, true, 0.0f);
  const int first = chunk_first_[chunk], last = chunk_first_[chunk + 1] - 1;
  const bool first_chunk = chunks_[chunk].begin == 0;
  auto input_of = [&](int l) -> const void* {
    return l > first ? layer_out(s, l - 1) : (first_chunk ? nullptr : s.input);
  };
  if (pass == BackwardPass::WEIGHT) {
    // Zero bubble's W: every layer's parameter gradients from its saved activations, its input and
    // the output gradients its input part kept (same layer order as FULL, so a tied parameter of a
    // whole model accumulates in the same order).
    for (int l = last; l >= first; --l) {
      if (!recomputes(l))  // else done whole in INPUT
        layers_[l]->backward_weight(ctx, input_of(l), layer_saved(s, l),
                                    s.deferred + deferred_offsets_[l]);
      finish_layer_grads(l);
      if (after_layer) after_layer(l);
    }
    return;
  }
  const void* dout = loss ? nullptr : s.dout;
  for (int l = last; l >= first; --l) {
    const void* in = input_of(l);
    void* din = l > first ? dbuf_[l % 2] : (first_chunk ? nullptr : s.din);
    void* saved = layer_saved(s, l);
    if (recomputes(l)) {
      layers_[l]->forward(ctx, in, recompute_buf_);  // PTD-P §3: recompute, then backward
      saved = recompute_buf_;
    }
    if (pass == BackwardPass::FULL || recomputes(l)) {
      layers_[l]->backward(ctx, in, dout, din, saved);
      finish_layer_grads(l);
      if (after_layer && pass == BackwardPass::FULL) after_layer(l);
    } else {
      layers_[l]->backward_input(ctx, in, dout, din, saved, s.deferred + deferred_offsets_[l]);
    }
    dout = din;
  }
}

double SequentialModel::forward(int slot, const MicroBatch& mb, bool training, float loss_scale) {
  BATON_ASSERT(is_whole_model(), "SequentialModel::forward needs the whole model on this rank");
  load(slot, mb, true, true);
  forward_chunk(0, slot, training, loss_scale);
  return take_loss_sum();
}

void SequentialModel::backward(int slot, const std::function<void(int)>& after_layer) {
  BATON_ASSERT(is_whole_model(), "SequentialModel::backward needs the whole model on this rank");
  backward_chunk(0, slot, after_layer);
}

}  // namespace baton
