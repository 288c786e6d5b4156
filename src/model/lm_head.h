// Final LayerNorm + language-model head tied to the token embedding + softmax cross-entropy.
//   lnf = layernorm(x); logits[N,Vp] = lnf . wte^T; loss[n] = -log softmax(logits[n,:V])[target]
// Tensor-parallel: the head is column-parallel over the vocabulary (each rank's wte shard gives
// logits[N, Vp/tp]) and the cross-entropy is vocab-parallel: ranks exchange per-row max, sum of
// exponentials and target logit, never the logits (Megatron). Per-token losses end up on every
// tensor-parallel rank.
// In training mode the forward pass also turns the saved logits into their gradient in place
// (fused classifier, as llm.c does), so backward is two GEMMs and no softmax is recomputed.
// Saved per micro-batch: lnf[Nl,C] mean[Nl] rstd[Nl] (lnf gathered [N,C] with sequence
// parallelism) logits[N,Vl] losses[N] (the output). Vl = Vp/tp.
#pragma once
#include "model/carver.h"
#include "model/gpt_dims.h"
#include "model/layer.h"
#include "model/tensor_parallel.h"

namespace baton {

class LmHead : public Layer {
 public:
  LmHead(const GptDims& d, const TensorParallel& tp, const Backend& be)
      : d_(d), tp_(tp), act_size_(be.act_size()) {}
  std::string name() const override { return "lm_head"; }
  // Registers lnf; uses the embedding's "wte" (tied), registering it when this table has none
  // (a pipeline stage without the embedding).
  void add_params(ParamTable& table) override;
  size_t saved_bytes(int B, int T) const override;
  size_t workspace_bytes(int B, int T) const override;
  size_t output_bytes(int B, int T) const override { return size_t(B) * T * sizeof(float); }
  size_t input_bytes(int B, int T) const override {
    return size_t(tp_.local_rows(B * T)) * d_.d_model * act_size_;
  }
  int64_t loss_terms(int B, int T) const override { return int64_t(B) * T; }
  // Per-token losses [N] (fp32).
  void* output(void* saved, int B, int T) const override;
  // This rank's logits [N,Vl] in the act dtype (after a non-training forward; gradients after a
  // training one).
  void* logits(void* saved, int B, int T) const;
  void forward(const LayerCtx& ctx, const void* in, void* saved) override;
  void backward(const LayerCtx& ctx, const void* in, const void* dout, void* din,
                void* saved) override;
  // Zero bubble (layer.h): deferred = the gradient of lnf's output dlnf[Nl,C]; the weight part
  // recomputes nothing (the logits gradient is saved) and runs the wte GEMM and lnf's gains.
  size_t deferred_bytes(int B, int T) const override {
    return size_t(tp_.local_rows(B * T)) * d_.d_model * act_size_;
  }
  void backward_input(const LayerCtx& ctx, const void* in, const void* dout, void* din,
                      void* saved, void* deferred) override;
  void backward_weight(const LayerCtx& ctx, const void* in, void* saved,
                       void* deferred) override;

 private:
  struct Saved;
  struct Workspace;
  Saved views(Carver& c, int B, int T) const;
  Saved views(void* saved, int B, int T) const;
  Workspace scratch(Carver& c, int B, int T) const;
  void cross_entropy(const LayerCtx& ctx, void* logits, float* losses, int N) const;
  GptDims d_;
  const TensorParallel& tp_;
  size_t act_size_;
  int lnf_w_ = -1, lnf_b_ = -1, wte_ = -1;
};

}  // namespace baton
