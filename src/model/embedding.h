// Token + learned position embedding (GPT-2): out[B,T,C] = wte[token] + wpe[t].
// Vocab-parallel (Megatron): each tensor-parallel rank holds Vp/tp rows of wte, looks up the tokens
// in its range (zeros elsewhere; wpe is added on rank 0 only) and the shards are summed by the
// tensor-parallel exit (all-reduce, or reduce-scatter to local rows with sequence parallelism).
// wte [Vp,C] is tied with the LM head (lm_head.h), which looks it up by name.
#pragma once
#include "model/gpt_dims.h"
#include "model/layer.h"
#include "model/tensor_parallel.h"

namespace baton {

class Embedding : public Layer {
 public:
  Embedding(const GptDims& d, const TensorParallel& tp, const Backend& be)
      : d_(d), tp_(tp), act_size_(be.act_size()) {}
  std::string name() const override { return "embedding"; }
  void add_params(ParamTable& table) override;
  size_t saved_bytes(int B, int T) const override { return output_bytes(B, T); }
  // The full [N, C] partial sums (sequence parallelism), then with dropout the local rows'
  // dropped output gradient.
  size_t workspace_bytes(int B, int T) const override {
    return (size_t(B) * T + (d_.dropout > 0 ? tp_.local_rows(B * T) : 0)) * d_.d_model * act_size_;
  }
  size_t output_bytes(int B, int T) const override {
    return size_t(tp_.local_rows(B * T)) * d_.d_model * act_size_;
  }
  size_t input_bytes(int, int) const override { return 0; }  // reads the tokens
  void* output(void* saved, int, int) const override { return saved; }
  void forward(const LayerCtx& ctx, const void* in, void* saved) override;
  void backward(const LayerCtx& ctx, const void* in, const void* dout, void* din,
                void* saved) override;
  // Zero bubble (layer.h): everything is weight gradient; the input part only gathers the output
  // gradient (a collective under sequence parallelism) into `deferred` [N,C].
  size_t deferred_bytes(int B, int T) const override {
    return size_t(B) * T * d_.d_model * act_size_;
  }
  void backward_input(const LayerCtx& ctx, const void* in, const void* dout, void* din,
                      void* saved, void* deferred) override;
  void backward_weight(const LayerCtx& ctx, const void* in, void* saved,
                       void* deferred) override;

 private:
  const void* dropped_gradient(const LayerCtx& ctx, const void* dout) const;
  GptDims d_;
  const TensorParallel& tp_;
  size_t act_size_;
  int wte_ = -1, wpe_ = -1;
};

}  // namespace baton
