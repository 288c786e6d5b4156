// One GPT-2 transformer block (pre-LayerNorm), Megatron tensor-parallel:
//   x2  = x + proj(attention(qkv(ln1(x))))      qkv column-parallel (NH/tp heads per rank),
//   out = x2 + fcproj(gelu(fc(ln2(x2))))        proj row-parallel; fc column-, fcproj row-parallel
// One tensor-parallel exit per sub-block forward and one entry backward: one all-reduce each for
// attention and MLP in each direction (or all-gather/reduce-scatter with sequence parallelism).
// Shapes: N = B*T rows, Nl = rows held outside tensor-parallel regions (N, or N/tp with sequence
// parallelism), Cl = C/tp, NHl = NH/tp.
// Saved per micro-batch: ln1[Nl,C] mean1/rstd1[Nl] (ln1 gathered [N,C] with SP) qkv[N,3Cl]
// atty[N,Cl] att[B,NHl,T,T] x2[Nl,C] ln2[Nl,C] mean2/rstd2[Nl] (ln2 gathered [N,C] with SP)
// fch[N,4Cl] fch_gelu[N,4Cl] out[Nl,C] (att in the scratch instead with selective recomputation).
#pragma once
#include "model/gpt_dims.h"
#include "model/layer.h"
#include "model/tensor_parallel.h"

namespace baton {

class TransformerBlock : public Layer {
 public:
  // `recompute_attention`: selective recomputation (Korthikanti et al.; PTD-P notes-dissertation
  // §3): the attention probabilities att[B,NHl,T,T] live in the shared scratch instead of the
  // saved activations and are recomputed from the saved qkv before the attention backward.
  TransformerBlock(const GptDims& d, int index, const TensorParallel& tp,
                   bool recompute_attention = false)
      : d_(d), index_(index), tp_(tp), recompute_attention_(recompute_attention) {}
  std::string name() const override;
  void add_params(ParamTable& table) override;
  size_t saved_floats(int B, int T) const override;
  size_t workspace_floats(int B, int T) const override;
  size_t output_floats(int B, int T) const override {
    return size_t(tp_.local_rows(B * T)) * d_.d_model;
  }
  float* output(float* saved, int B, int T) const override;
  void forward(const LayerCtx& ctx, const float* in, float* saved) override;
  void backward(const LayerCtx& ctx, const float* in, const float* dout, float* din,
                float* saved) override;
  // Zero bubble split (layer.h): deferred = the output gradients of the four matmuls and of the
  // two layernorms: dmlp[N,C] dfch[N,4Cl] dattn[N,C] dqkv[N,3Cl] dln2[Nl,C] dln1[Nl,C].
  size_t deferred_floats(int B, int T) const override;
  void backward_input(const LayerCtx& ctx, const float* in, const float* dout, float* din,
                      float* saved, float* deferred) override;
  void backward_weight(const LayerCtx& ctx, const float* in, float* saved,
                       float* deferred) override;

 private:
  struct Saved;      // views into the saved buffer
  struct Workspace;  // views into the shared scratch
  struct Deferred;   // views into the deferred buffer (zero bubble)
  Saved views(float* saved, int B, int T) const;
  Workspace scratch(float* ws, int B, int T) const;
  Deferred deferred_views(float* d, int B, int T) const;
  GptDims d_;
  int index_;
  const TensorParallel& tp_;
  bool recompute_attention_;
  int ln1_w_ = -1, ln1_b_ = -1, qkv_w_ = -1, qkv_b_ = -1, proj_w_ = -1, proj_b_ = -1;
  int ln2_w_ = -1, ln2_b_ = -1, fc_w_ = -1, fc_b_ = -1, fcproj_w_ = -1, fcproj_b_ = -1;
};

}  // namespace baton
