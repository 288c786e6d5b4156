// ModelStage; see model_stage.h.
#include "train/loop/model_stage.h"

#include <algorithm>

#include "core/error.h"
#include "core/timer.h"

namespace baton {

ModelStage::ModelStage(SequentialModel& model, std::vector<int> model_stages, GradSync& sync,
                       WeightVersions* versions, UpdateFn on_update)
    : m_(model), stages_(std::move(model_stages)), sync_(sync), versions_(versions),
      on_update_(std::move(on_update)) {
  BATON_ASSERT(static_cast<int>(stages_.size()) == m_.num_chunks(), "{} model stages for {} chunks",
               stages_.size(), m_.num_chunks());
}

int ModelStage::chunk(int stage) const {
  const auto it = std::find(stages_.begin(), stages_.end(), stage);
  return it == stages_.end() ? -1 : static_cast<int>(it - stages_.begin());
}

void ModelStage::set_program(const std::vector<pipeline::Instr>& list) {
  using pipeline::Op;
  last_before_update_.clear();
  std::set<int> seen;  // stages whose last backward before the next update was found
  for (size_t i = list.size(); i-- > 0;) {
    const pipeline::Instr& in = list[i];
    if (in.op == Op::REDUCE_GRADS) seen.clear();
    if ((in.op == Op::BWD || in.op == Op::BWD_WEIGHT) && seen.insert(in.stage).second)
      last_before_update_.insert({in.stage, in.microbatch});
  }
}

size_t ModelStage::boundary_count(int boundary) const {
  // The boundary after model stage `boundary`: its output on the sender, the next stage's input on
  // the receiver.
  if (const int c = chunk(boundary); c >= 0) return m_.chunk_output_count(c, w_.micro, w_.T);
  const int c = chunk(boundary + 1);
  BATON_ASSERT(c >= 0, "boundary {} is not next to a stage of this rank", boundary);
  return m_.chunk_input_count(c, w_.micro, w_.T);
}

void ModelStage::load(int stage, int microbatch, int slot) {
  const int c = chunk(stage);
  BATON_ASSERT(c >= 0 && w_.batch, "LOAD of stage {} without work or stage", stage);
  const bool first = m_.chunks()[c].begin == 0, last = m_.chunks()[c].end == m_.builder().num_layers();
  const auto [batch, row] = origin(microbatch);
  (*w_.batch)(batch, row, w_.micro, batch_);
  batch_.batch = batch;
  batch_.row = row;
  m_.load(slot, batch_.view(), first, last);
}

std::pair<int64_t, int> ModelStage::origin(int microbatch) const {
  return {w_.first_batch + microbatch / w_.per_batch, w_.row0 + (microbatch % w_.per_batch) * w_.micro};
}

void ModelStage::forward(int stage, int microbatch, int slot) {
  if (before_forward_ && w_.training) before_forward_(stage, microbatch, selected_version_);
  const auto [batch, row] = origin(microbatch);
  m_.set_shape(slot, w_.micro, w_.T, batch, row);  // a middle stage loads nothing
  const WorkTimer timer;
  m_.forward_chunk(chunk(stage), slot, w_.training, w_.loss_scale);
  if (after_compute_ && w_.training) after_compute_(microbatch, timer.elapsed());
}

// BWD: the chunk's whole backward. Zero bubble (zb-h1, Qi et al. §2–3): BWD_INPUT only the input
// gradient (sent upstream right after), keeping each matmul's and layernorm's output gradient in
// the slot; BWD_WEIGHT, later in the list, the parameter gradients from them (where the layers'
// gradients become final).
void ModelStage::backward(int stage, int microbatch, int slot, pipeline::BackwardPart part) {
  using pipeline::BackwardPart;
  const BackwardPass pass = part == BackwardPart::FULL    ? BackwardPass::FULL
                            : part == BackwardPart::INPUT ? BackwardPass::INPUT
                                                          : BackwardPass::WEIGHT;
  const bool last = part != BackwardPart::INPUT && last_before_update_.count({stage, microbatch});
  const WorkTimer timer;
  m_.backward_chunk(chunk(stage), slot,
                    last ? std::function<void(int)>([this](int l) { sync_.layer_done(l); })
                         : std::function<void(int)>(),
                    pass);
  if (after_compute_) after_compute_(microbatch, timer.elapsed());
}

void ModelStage::reduce_tied(int) { sync_.reduce_tied(); }

void ModelStage::reduce_grads(int) {
  pending_ = sync_.reduce(held_loss_ + m_.take_loss_sum(), step_label_);
  held_loss_ = 0;
}

void ModelStage::optimizer_step(int, int weight_version) { on_update_(weight_version, pending_); }

void ModelStage::select_version(int, int weight_version) {
  selected_version_ = weight_version;
  if (versions_) versions_->select(weight_version);  // flush kinds: the current weights
}

}  // namespace baton
