// One GPT-2 transformer block (pre-LayerNorm), Megatron tensor-parallel:
//   x2  = x + proj(attention(qkv(ln1(x))))      qkv column-parallel (NH/tp heads per rank),
//   out = x2 + fcproj(gelu(fc(ln2(x2))))        proj row-parallel; fc column-, fcproj row-parallel
// One tensor-parallel exit per sub-block forward and one entry backward: one all-reduce each for
// attention and MLP in each direction (or all-gather/reduce-scatter with sequence parallelism).
// Shapes: N = B*T rows, Nl = rows held outside tensor-parallel regions (N, or N/tp with sequence
// parallelism), Cl = C/tp, NHl = NH/tp.
// Saved per micro-batch: ln1[Nl,C] mean1/rstd1[Nl] (ln1 gathered [N,C] with SP) qkv[N,3Cl]
// atty[N,Cl] attention state (the backend's: probabilities [B,NHl,T,T] or logsumexp [B,NHl,T])
// x2[Nl,C] ln2[Nl,C] mean2/rstd2[Nl] (ln2 gathered [N,C] with SP) fch[N,4Cl] fch_gelu[N,4Cl]
// out[Nl,C]; activations in the backend's act dtype, mean/rstd and the attention state fp32.
#pragma once
#include "model/carver.h"
#include "model/gpt_dims.h"
#include "model/layer.h"
#include "model/tensor_parallel.h"

namespace baton {

class TransformerBlock : public Layer {
 public:
  // `recompute_attention`: selective recomputation (Korthikanti et al.; PTD-P notes-dissertation
  // §3): the attention probabilities att[B,NHl,T,T] live in the shared scratch instead of the
  // saved activations and are recomputed from the saved qkv before the attention backward. A
  // backend whose attention state is only O(T) per head (flash attention's logsumexp) keeps it
  // saved and recomputes nothing: selective recomputation is then free.
  TransformerBlock(const GptDims& d, int index, const TensorParallel& tp, const Backend& be,
                   bool recompute_attention = false);
  std::string name() const override;
  void add_params(ParamTable& table) override;
  size_t saved_bytes(int B, int T) const override;
  size_t workspace_bytes(int B, int T) const override;
  size_t output_bytes(int B, int T) const override {
    return size_t(tp_.local_rows(B * T)) * d_.d_model * act_size_;
  }
  size_t input_bytes(int B, int T) const override { return output_bytes(B, T); }
  bool recomputable() const override { return true; }
  void* output(void* saved, int B, int T) const override;
  void forward(const LayerCtx& ctx, const void* in, void* saved) override;
  void backward(const LayerCtx& ctx, const void* in, const void* dout, void* din,
                void* saved) override;
  // Zero bubble split (layer.h): deferred = the output gradients of the four matmuls and of the
  // two layernorms: dmlp[N,C] dfch[N,4Cl] dattn[N,C] dqkv[N,3Cl] dln2[Nl,C] dln1[Nl,C].
  size_t deferred_bytes(int B, int T) const override;
  void backward_input(const LayerCtx& ctx, const void* in, const void* dout, void* din,
                      void* saved, void* deferred) override;
  void backward_weight(const LayerCtx& ctx, const void* in, void* saved,
                       void* deferred) override;

 private:
  // Hidden dropout of branch 0 (attention) or 1 (MLP): y = dropout(x) (training only); dropped()
  // applies it to a gradient g into buf and returns buf (or g when there is no dropout).
  void drop(const LayerCtx& ctx, void* y, const void* x, int branch) const;
  const void* dropped(const LayerCtx& ctx, void* buf, const void* g, int branch) const;
  struct Saved;      // views into the saved buffer
  struct Workspace;  // views into the shared scratch
  struct Deferred;   // views into the deferred buffer (zero bubble)
  // Each carves its views in order; over a null base the Carver only measures (the sizes).
  Saved views(Carver& c, int B, int T) const;
  Saved views(void* saved, int B, int T) const;
  Workspace scratch(Carver& c, int B, int T) const;
  Workspace scratch(void* ws, int B, int T) const;
  Deferred deferred_views(Carver& c, int B, int T) const;
  size_t state_floats(int B, int T) const;  // the attention state of one micro-batch
  GptDims d_;
  int index_;
  const TensorParallel& tp_;
  const Backend& be_;
  size_t act_size_;
  bool recompute_attention_;  // selective recomputation that actually recomputes
  int ln1_w_ = -1, ln1_b_ = -1, qkv_w_ = -1, qkv_b_ = -1, proj_w_ = -1, proj_b_ = -1;
  int ln2_w_ = -1, ln2_b_ = -1, fc_w_ = -1, fc_b_ = -1, fcproj_w_ = -1, fcproj_b_ = -1;
};

}  // namespace baton
