// Final LayerNorm + language-model head tied to the token embedding + fused softmax cross-entropy.
//   lnf = layernorm(x); logits[N,Vp] = lnf . wte^T; loss[n] = -log softmax(logits[n,:V])[target]
// In training mode the forward pass also turns the saved logits into their gradient in place
// (fused classifier, as llm.c does), so backward is two GEMMs and no softmax is recomputed.
// Saved per micro-batch: lnf[N,C] mean[N] rstd[N] logits[N,Vp] losses[N] (the output).
#pragma once
#include "model/gpt_dims.h"
#include "model/layer.h"

namespace baton {

class LmHead : public Layer {
 public:
  explicit LmHead(const GptDims& d) : d_(d) {}
  std::string name() const override { return "lm_head"; }
  // Registers lnf; uses the embedding's "wte" (tied), registering it when this table has none
  // (a pipeline stage without the embedding).
  void add_params(ParamTable& table) override;
  size_t saved_floats(int B, int T) const override;
  size_t workspace_floats(int B, int T) const override;
  size_t output_floats(int B, int T) const override { return size_t(B) * T; }
  // Per-token losses [N].
  float* output(float* saved, int B, int T) const override;
  // Logits [N,Vp] (after a non-training forward; gradients after a training one).
  float* logits(float* saved, int B, int T) const;
  void forward(const LayerCtx& ctx, const float* in, float* saved) override;
  void backward(const LayerCtx& ctx, const float* in, const float* dout, float* din,
                float* saved) override;

 private:
  GptDims d_;
  int lnf_w_ = -1, lnf_b_ = -1, wte_ = -1;
};

}  // namespace baton
