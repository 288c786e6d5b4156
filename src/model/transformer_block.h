// One GPT-2 transformer block (pre-LayerNorm):
//   x2  = x + proj(attention(qkv(ln1(x))))
//   out = x2 + fcproj(gelu(fc(ln2(x2))))
// Saved per micro-batch (shapes for N = B*T rows): ln1[N,C] mean1/rstd1[N] qkv[N,3C] atty[N,C]
// att[B,NH,T,T] x2[N,C] ln2[N,C] mean2/rstd2[N] fch[N,4C] fch_gelu[N,4C] out[N,C].
#pragma once
#include "model/gpt_dims.h"
#include "model/layer.h"

namespace baton {

class TransformerBlock : public Layer {
 public:
  TransformerBlock(const GptDims& d, int index) : d_(d), index_(index) {}
  std::string name() const override;
  void add_params(ParamTable& table) override;
  size_t saved_floats(int B, int T) const override;
  size_t workspace_floats(int B, int T) const override;
  size_t output_floats(int B, int T) const override { return size_t(B) * T * d_.d_model; }
  float* output(float* saved, int B, int T) const override;
  void forward(const LayerCtx& ctx, const float* in, float* saved) override;
  void backward(const LayerCtx& ctx, const float* in, const float* dout, float* din,
                float* saved) override;

 private:
  struct Saved;  // views into the saved buffer
  Saved views(float* saved, int B, int T) const;
  GptDims d_;
  int index_;
  int ln1_w_ = -1, ln1_b_ = -1, qkv_w_ = -1, qkv_b_ = -1, proj_w_ = -1, proj_b_ = -1;
  int ln2_w_ = -1, ln2_b_ = -1, fc_w_ = -1, fc_b_ = -1, fcproj_w_ = -1, fcproj_b_ = -1;
};

}  // namespace baton
