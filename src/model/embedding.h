// Token + learned position embedding (GPT-2): out[B,T,C] = wte[token] + wpe[t].
// wte [Vp,C] is tied with the LM head (lm_head.h), which looks it up by name.
#pragma once
#include "model/gpt_dims.h"
#include "model/layer.h"

namespace baton {

class Embedding : public Layer {
 public:
  explicit Embedding(const GptDims& d) : d_(d) {}
  std::string name() const override { return "embedding"; }
  void add_params(ParamTable& table) override;
  size_t saved_floats(int B, int T) const override { return output_floats(B, T); }
  size_t workspace_floats(int, int) const override { return 0; }
  size_t output_floats(int B, int T) const override { return size_t(B) * T * d_.d_model; }
  float* output(float* saved, int, int) const override { return saved; }
  void forward(const LayerCtx& ctx, const float* in, float* saved) override;
  void backward(const LayerCtx& ctx, const float* in, const float* dout, float* din,
                float* saved) override;

 private:
  GptDims d_;
  int wte_ = -1, wpe_ = -1;
};

}  // namespace baton
