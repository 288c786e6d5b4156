// GPT-2 as a ModelBuilder (learned positions, pre-LayerNorm blocks, 4x GELU MLP, LM head tied to
// the token embedding, vocabulary padded to a multiple of 128) for the generic layer stack:
//   global layers [Embedding, TransformerBlock x L, LmHead]        (g: 0, 1..L, L + 1)
// The embedding (layer 0) and the head (layer L + 1) share "wte"; on different pipeline stages
// each holds a copy, initialised identically (init is a pure function of (seed, name)), and the
// runtime sums the copies' gradients over the embedding group (Megatron).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "model/gpt_dims.h"
#include "model/model_builder.h"
#include "model/sequential_model.h"

namespace baton {

class GptBuilder final : public ModelBuilder {
 public:
  explicit GptBuilder(const GptDims& dims);
  const GptDims& dims() const { return d_; }

  std::string family() const override { return "GPT"; }
  std::string describe() const override;
  int num_layers() const override { return d_.n_layer + 2; }
  std::unique_ptr<Layer> make_layer(int g, const TensorParallel& tp, const Backend& be,
                                    Recompute recompute) const override;
  std::vector<TiedLayers> tied_layers() const override { return {{"wte", {0, d_.n_layer + 1}}}; }
  InputKind input_kind() const override { return InputKind::TOKENS; }
  int max_positions() const override { return d_.seq_len; }
  int64_t input_elements(int B, int T) const override { return int64_t(B) * T; }
  int64_t target_elements(int B, int T) const override { return int64_t(B) * T; }
  double flops_per_step(int64_t samples) const override;
  std::string flops_formula() const override { return "72*B*s*l*h^2*(1 + s/6h + V/12lh)"; }
  double flops_per_token_6n() const override;
  // Megatron's split (PTD-P notes-dissertation §1.6 / §3): the L blocks divided evenly over the
  // model stages, the embedding on model stage 0 and the head on the last. Throws Error (with a
  // hint) when `stages` does not divide n_layer.
  std::vector<LayerRange> default_stages(int stages) const override;

 private:
  GptDims d_;
};

std::shared_ptr<const GptBuilder> make_gpt(const GptDims& dims);

// The chunks of pipeline rank `pp_rank` under the default split (ascending): model stage
// s = c·pp + pp_rank of pp·vp (PTD-P: chunk c of rank r). Throws like default_stages.
std::vector<LayerRange> pipeline_chunks(int n_layer, int pp, int vp, int pp_rank);

// Model FLOPs of one optimizer step for a GPT (PTD-P, Narayanan et al. eq. in notes-dissertation):
// F = 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)), B = sequences per step (global batch), s = seq_len,
// l = layers, h = d_model, V = vocabulary (padded, as computed).
double gpt_model_flops_per_step(int64_t global_batch, int seq_len, int n_layer, int d_model,
                                int vocab);
// Parameters of a GPT-2 (tied head, padded vocabulary V, learned positions T, biases):
// N = V·C + T·C + L·(12·C² + 13·C) + 2·C — llm.c's num_parameters (124,475,904 for GPT-2 124M).
double gpt_parameter_count(int seq_len, int n_layer, int d_model, int vocab);
// Hardware FLOPs with full recomputation: 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)).
double gpt_hardware_flops_full_recompute(int64_t global_batch, int seq_len, int n_layer,
                                         int d_model, int vocab);

// The GPT's dimensions behind a builder made by make_gpt, or a model built from one (asserts it
// is one).
const GptDims& gpt_dims_of(const ModelBuilder& builder);
const GptDims& gpt_dims_of(const SequentialModel& model);
// Row `row` of the logits [B*T, Vp] of `slot` after a forward without targets, as fp32 on the
// host. Needs the head on this rank and no tensor parallelism (the full vocabulary).
void gpt_logits_row_to_host(SequentialModel& model, int slot, int row, float* dst);

}  // namespace baton
