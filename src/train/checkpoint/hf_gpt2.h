// Hugging Face GPT-2 interop (DESIGN §6 "Interop", docs/checkpoints.md "Hugging Face GPT-2"): a
// baton GPT's parameters as the state dict of transformers' GPT2LMHeadModel, in a directory holding
// model.safetensors (train/checkpoint/safetensors.h) and config.json.
//
// Mapping (C = d_model, V = vocabulary, Vp = V padded to a multiple of 128, T = seq_len):
//   wte [Vp, C]                 transformer.wte.weight [V, C]     the first V rows (padding dropped)
//   wpe [T, C]                  transformer.wpe.weight [T, C]
//   h.i.ln1.{weight,bias}       transformer.h.i.ln_1.{weight,bias}
//   h.i.attn.qkv.weight [3C, C] transformer.h.i.attn.c_attn.weight [C, 3C]   transposed (Conv1D: x @ W)
//   h.i.attn.qkv.bias [3C]      transformer.h.i.attn.c_attn.bias
//   h.i.attn.proj.weight [C, C] transformer.h.i.attn.c_proj.weight [C, C]    transposed
//   h.i.ln2.*                   transformer.h.i.ln_2.*
//   h.i.mlp.fc.weight [4C, C]   transformer.h.i.mlp.c_fc.weight [C, 4C]      transposed
//   h.i.mlp.proj.weight [C, 4C] transformer.h.i.mlp.c_proj.weight [4C, C]    transposed
//   lnf.*                       transformer.ln_f.*
// lm_head.weight is tied to transformer.wte.weight and not written (what save_pretrained writes
// for GPT-2); on import it may be present if it equals wte. baton's fused q|k|v rows are GPT-2's
// c_attn columns in the same order (q, k, v; heads of C/NH inside each), so no permutation.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/gpt_dims.h"
#include "train/checkpoint/checkpoint.h"

namespace baton {

namespace safetensors {
class Reader;
}

// One parameter of the mapping.
struct HfTensor {
  enum class Kind { COPY, TRANSPOSE, VOCAB_ROWS, POSITION_ROWS };
  std::string baton;                 // ParamTable name, e.g. "h.0.attn.qkv.weight"
  std::string hf;                    // GPT2LMHeadModel name, e.g. "transformer.h.0.attn.c_attn.weight"
  Kind kind = Kind::COPY;
  std::vector<int64_t> baton_shape;  // the full logical tensor
  std::vector<int64_t> hf_shape;     // as exported
};
// Every parameter of a GPT of `d`, in ParamTable order.
std::vector<HfTensor> hf_gpt2_tensors(const GptDims& d);

// config.json for a GPT of `d`; `eos_id` >= 0: bos_token_id = eos_token_id = it (GPT-2's
// <|endoftext|> convention), else both null.
nlohmann::json hf_gpt2_config(const GptDims& d, int eos_id);

struct HfExportResult {
  uint64_t bytes = 0;  // model.safetensors
  int tensors = 0;
};
// Writes OUT/model.safetensors and OUT/config.json (OUT created if missing; both written through a
// .tmp and a rename) from the params/ tensors of checkpoint `ckpt` — full tensors, so every layout
// that wrote it gives the same bytes.
HfExportResult export_hf_gpt2(CheckpointReader& ckpt, const GptDims& d, int eos_id, const std::string& out_dir);

// A Hugging Face GPT-2 directory opened for import: config.json and model.safetensors (or the
// shards a model.safetensors.index.json names). Throws Error naming the file.
class HfGpt2Source {
 public:
  explicit HfGpt2Source(const std::string& dir);
  ~HfGpt2Source();
  // Refuses (Error with a hint) a config.json this model cannot load: another model_type, depth,
  // width or heads than `d`, a vocab_size other than d.vocab (`vocab_source` says where that came
  // from: "the tokenizer 'x.model'", "model.vocab_size"), fewer positions than d.seq_len, another
  // activation, layer-norm epsilon or attention scaling than baton's.
  void check(const GptDims& d, const std::string& vocab_source) const;
  // Fills every shard named "params/<baton name>" of a GPT of `d` (any box of the full tensor, as
  // a tensor-parallel rank holds it) from the safetensors, converted by the mapping above; wte's
  // padding rows are zero, wpe keeps its first d.seq_len positions. Errors name the tensor.
  void read(std::span<const TensorShard> shards, const GptDims& d) const;
  std::string describe() const;  // "DIR (GPT-2 12 layers, n_embd 768, vocab 50257, 1 file)"

 private:
  std::string dir_;
  nlohmann::json config_;
  std::vector<std::unique_ptr<safetensors::Reader>> files_;
  // The file and stored name of an HF tensor ("transformer.X" or the base model's "X").
  std::pair<const safetensors::Reader*, std::string> locate(const std::string& hf_name) const;
  std::vector<float> load(const HfTensor& t) const;  // the baton full tensor
};

}  // namespace baton
