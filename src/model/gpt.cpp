// The GPT builder; see gpt.h.
#include "model/gpt.h"

#include "core/error.h"
#include "model/embedding.h"
#include "model/lm_head.h"
#include "model/transformer_block.h"

namespace baton {

GptBuilder::GptBuilder(const GptDims& dims) : d_(dims) {
  BATON_ASSERT(d_.n_head > 0 && d_.d_model % d_.n_head == 0, "n_head must divide d_model");
}

std::string GptBuilder::describe() const {
  return fmt::format("GPT {} layers, d_model {}, {} heads, seq_len {}, vocab {} (padded {}){}", d_.n_layer,
                     d_.d_model, d_.n_head, d_.seq_len, d_.vocab, d_.vocab_padded,
                     d_.dropout > 0 ? fmt::format(", hidden dropout {}", d_.dropout) : "");
}

std::unique_ptr<Layer> GptBuilder::make_layer(int g, const TensorParallel& tp, const Backend& be,
                                              Recompute recompute) const {
  BATON_ASSERT(g >= 0 && g < num_layers(), "GPT layer {} of {}", g, num_layers());
  BATON_ASSERT(d_.n_head % tp.size == 0 && d_.vocab_padded % tp.size == 0,
               "tp={} must divide n_head={} and the padded vocabulary {}", tp.size, d_.n_head,
               d_.vocab_padded);
  if (g == 0) return std::make_unique<Embedding>(d_, tp, be);
  if (g == d_.n_layer + 1) return std::make_unique<LmHead>(d_, tp, be);
  return std::make_unique<TransformerBlock>(d_, g - 1, tp, be, recompute == Recompute::SELECTIVE);
}

double GptBuilder::flops_per_step(int64_t samples) const {
  return gpt_model_flops_per_step(samples, d_.seq_len, d_.n_layer, d_.d_model, d_.vocab_padded);
}

double GptBuilder::flops_per_token_6n() const {
  return 6.0 * gpt_parameter_count(d_.seq_len, d_.n_layer, d_.d_model, d_.vocab_padded) +
         6.0 * d_.n_layer * double(d_.d_model) * d_.seq_len;
}

std::vector<LayerRange> GptBuilder::default_stages(int stages) const {
  const int n_layer = d_.n_layer;
  BATON_REQUIRE(stages >= 1 && n_layer % stages == 0,
                fmt::format("model.n_layer = {} does not split evenly into {} pipeline model stages "
                            "(parallel.pp × parallel.vp)", n_layer, stages),
                "Megatron's split gives every model stage the same number of transformer blocks: "
                "use an n_layer that is a multiple of pp × vp, change pp / vp, or give the stage "
                "boundaries yourself (parallel.stages)");
  const int k = n_layer / stages;
  std::vector<LayerRange> out;
  for (int s = 0; s < stages; ++s) {
    LayerRange r{1 + s * k, 1 + (s + 1) * k};
    if (s == 0) r.begin = 0;                       // the embedding
    if (s == stages - 1) r.end = n_layer + 2;      // the head
    out.push_back(r);
  }
  return out;
}

std::shared_ptr<const GptBuilder> make_gpt(const GptDims& dims) {
  return std::make_shared<const GptBuilder>(dims);
}

std::vector<LayerRange> pipeline_chunks(int n_layer, int pp, int vp, int pp_rank) {
  GptDims d;
  d.n_layer = n_layer;
  d.n_head = 1;
  d.d_model = 1;
  const std::vector<LayerRange> stages = GptBuilder(d).default_stages(pp * vp);
  BATON_ASSERT(pp_rank >= 0 && pp_rank < pp, "pipeline rank {} outside pp = {}", pp_rank, pp);
  std::vector<LayerRange> out;
  for (int c = 0; c < vp; ++c) out.push_back(stages[c * pp + pp_rank]);  // PTD-P: stage c·pp + r
  return out;
}

double gpt_model_flops_per_step(int64_t B, int s, int l, int h, int V) {
  const double hd = h;
  return 72.0 * B * s * l * hd * hd * (1.0 + s / (6.0 * hd) + V / (12.0 * l * hd));
}

double gpt_parameter_count(int seq_len, int n_layer, int d_model, int vocab) {
  const double C = d_model;
  return double(vocab) * C + double(seq_len) * C + n_layer * (12.0 * C * C + 13.0 * C) + 2.0 * C;
}

double gpt_hardware_flops_full_recompute(int64_t B, int s, int l, int h, int V) {
  const double hd = h;
  return 96.0 * B * s * l * hd * hd * (1.0 + s / (6.0 * hd) + V / (16.0 * l * hd));
}

const GptDims& gpt_dims_of(const ModelBuilder& builder) {
  const auto* gpt = dynamic_cast<const GptBuilder*>(&builder);
  BATON_ASSERT(gpt, "not a GPT: {}", builder.family());
  return gpt->dims();
}

const GptDims& gpt_dims_of(const SequentialModel& model) { return gpt_dims_of(model.builder()); }

void gpt_logits_row_to_host(SequentialModel& model, int slot, int row, float* dst) {
  BATON_ASSERT(!model.tp().active(), "full logits are not available under tensor parallelism");
  BATON_ASSERT(model.holds_last(), "logits need the LM head on this rank");
  const int last = model.num_layers() - 1;
  auto* head = dynamic_cast<LmHead*>(&model.layer(last));
  BATON_ASSERT(head, "the last layer is not a GPT head");
  Backend& be = model.backend();
  const size_t Vp = gpt_dims_of(model).vocab_padded;
  const void* logits = head->logits(model.layer_saved(slot, last), model.slot_B(slot), model.slot_T(slot));
  const void* src = act_at(logits, size_t(row) * Vp, be.act_size());
  if (be.act_dtype() == DType::F32) return be.to_host(dst, src, Vp * sizeof(float));
  std::vector<uint16_t> h(Vp);
  be.to_host(h.data(), src, Vp * sizeof(uint16_t));
  for (size_t j = 0; j < Vp; ++j) dst[j] = bf16_to_f32(h[j]);
}

}  // namespace baton
