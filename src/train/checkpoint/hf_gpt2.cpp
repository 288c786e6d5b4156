#include "train/checkpoint/hf_gpt2.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <fmt/ranges.h>

#include "core/error.h"
#include "train/checkpoint/safetensors.h"

namespace baton {
namespace {

namespace fs = std::filesystem;

constexpr const char* kWeights = "model.safetensors";
constexpr const char* kIndex = "model.safetensors.index.json";
constexpr const char* kConfig = "config.json";
constexpr const char* kParams = "params/";
constexpr double kLayerNormEps = 1e-5;  // baton's layernorm (backend/cpu/cpu_layernorm.cpp, kernels/)

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const std::vector<int64_t>& s) { return shape_string(s); }

// baton's full tensor -> the HF tensor.
void baton_to_hf(const HfTensor& t, const float* src, float* dst) {
  switch (t.kind) {
    case HfTensor::Kind::TRANSPOSE: {
      const int64_t R = t.baton_shape[0], K = t.baton_shape[1];  // baton [R, K] = hf [K, R]
      for (int64_t r = 0; r < R; ++r)
        for (int64_t k = 0; k < K; ++k) dst[k * R + r] = src[r * K + k];
      return;
    }
    case HfTensor::Kind::COPY:
    case HfTensor::Kind::VOCAB_ROWS:     // the first V of Vp rows
    case HfTensor::Kind::POSITION_ROWS:  // the same T rows
      std::memcpy(dst, src, size_t(numel_of(t.hf_shape)) * sizeof(float));
      return;
  }
}

// The HF tensor (of its stored shape `hf_shape`) -> baton's full tensor.
void hf_to_baton(const HfTensor& t, const float* src, float* dst) {
  const size_t n = size_t(numel_of(t.baton_shape));
  switch (t.kind) {
    case HfTensor::Kind::TRANSPOSE: {
      const int64_t R = t.baton_shape[0], K = t.baton_shape[1];
      for (int64_t r = 0; r < R; ++r)
        for (int64_t k = 0; k < K; ++k) dst[r * K + k] = src[k * R + r];
      return;
    }
    case HfTensor::Kind::VOCAB_ROWS: {  // V rows, then Vp - V rows of zeros
      const size_t m = size_t(numel_of(t.hf_shape));
      std::memcpy(dst, src, m * sizeof(float));
      std::fill(dst + m, dst + n, 0.0f);
      return;
    }
    case HfTensor::Kind::COPY:
    case HfTensor::Kind::POSITION_ROWS:  // the first T positions (rows) of n_positions
      std::memcpy(dst, src, n * sizeof(float));
      return;
  }
}

// Copies box (offset, extent) of the full C-order tensor `full` of `shape` into `dst` (C order).
void copy_box(const float* full, const std::vector<int64_t>& shape, const std::vector<int64_t>& offset,
              const std::vector<int64_t>& extent, float* dst) {
  const size_t nd = shape.size();
  if (nd == 0) {
    dst[0] = full[0];
    return;
  }
  for (int64_t e : extent)
    if (e == 0) return;
  std::vector<int64_t> stride(nd, 1);
  for (size_t i = nd - 1; i > 0; --i) stride[i - 1] = stride[i] * shape[i];
  const int64_t row = extent[nd - 1];
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < nd; ++i) rows *= extent[i];
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rem = r, src = offset[nd - 1];
    for (size_t i = nd - 1; i-- > 0;) {
      src += (offset[i] + rem % extent[i]) * stride[i];
      rem /= extent[i];
    }
    std::memcpy(dst + r * row, full + src, size_t(row) * sizeof(float));
  }
}

// A key of config.json, or GPT2Config's default when absent (transformers' GPT2Config()).
template <typename T>
T config_value(const nlohmann::json& c, const char* key, T fallback) {
  if (!c.contains(key) || c[key].is_null()) return fallback;
  try {
    return c[key].get<T>();
  } catch (const nlohmann::json::exception&) {
    throw Error(fmt::format("config.json: '{}' has the wrong type ({})", key, c[key].dump()),
                "a Hugging Face GPT-2 config.json (GPT2Config) is expected");
  }
}

// The names a GPT-2 state dict may hold besides the parameters: the attention's causal-mask
// buffers of old transformers versions ("h.0.attn.bias", "h.0.attn.masked_bias").
bool ignorable_buffer(const std::string& name) {
  const std::string n = name.rfind("transformer.", 0) == 0 ? name.substr(12) : name;
  if (n.rfind("h.", 0) != 0) return false;
  const size_t dot = n.find('.', 2);
  if (dot == std::string::npos) return false;
  const std::string rest = n.substr(dot);
  return rest == ".attn.bias" || rest == ".attn.masked_bias";
}

}  // namespace

std::vector<HfTensor> hf_gpt2_tensors(const GptDims& d) {
  using K = HfTensor::Kind;
  const int64_t C = d.d_model, V = d.vocab, Vp = d.vocab_padded, T = d.seq_len;
  std::vector<HfTensor> out;
  out.push_back({"wte", "transformer.wte.weight", K::VOCAB_ROWS, {Vp, C}, {V, C}});
  out.push_back({"wpe", "transformer.wpe.weight", K::POSITION_ROWS, {T, C}, {T, C}});
  for (int i = 0; i < d.n_layer; ++i) {
    const std::string b = fmt::format("h.{}.", i), h = fmt::format("transformer.h.{}.", i);
    out.push_back({b + "ln1.weight", h + "ln_1.weight", K::COPY, {C}, {C}});
    out.push_back({b + "ln1.bias", h + "ln_1.bias", K::COPY, {C}, {C}});
    out.push_back({b + "attn.qkv.weight", h + "attn.c_attn.weight", K::TRANSPOSE, {3 * C, C}, {C, 3 * C}});
    out.push_back({b + "attn.qkv.bias", h + "attn.c_attn.bias", K::COPY, {3 * C}, {3 * C}});
    out.push_back({b + "attn.proj.weight", h + "attn.c_proj.weight", K::TRANSPOSE, {C, C}, {C, C}});
    out.push_back({b + "attn.proj.bias", h + "attn.c_proj.bias", K::COPY, {C}, {C}});
    out.push_back({b + "ln2.weight", h + "ln_2.weight", K::COPY, {C}, {C}});
    out.push_back({b + "ln2.bias", h + "ln_2.bias", K::COPY, {C}, {C}});
    out.push_back({b + "mlp.fc.weight", h + "mlp.c_fc.weight", K::TRANSPOSE, {4 * C, C}, {C, 4 * C}});
    out.push_back({b + "mlp.fc.bias", h + "mlp.c_fc.bias", K::COPY, {4 * C}, {4 * C}});
    out.push_back({b + "mlp.proj.weight", h + "mlp.c_proj.weight", K::TRANSPOSE, {C, 4 * C}, {4 * C, C}});
    out.push_back({b + "mlp.proj.bias", h + "mlp.c_proj.bias", K::COPY, {C}, {C}});
  }
  out.push_back({"lnf.weight", "transformer.ln_f.weight", K::COPY, {C}, {C}});
  out.push_back({"lnf.bias", "transformer.ln_f.bias", K::COPY, {C}, {C}});
  return out;
}

nlohmann::json hf_gpt2_config(const GptDims& d, int eos_id) {
  nlohmann::json eos = eos_id >= 0 ? nlohmann::json(eos_id) : nlohmann::json(nullptr);
  // Keys of transformers' GPT2Config; dropout as baton applies it (hidden dropout on the embedding
  // and the residual branches; none on attention probabilities).
  return nlohmann::json{
      {"architectures", {"GPT2LMHeadModel"}},
      {"model_type", "gpt2"},
      {"vocab_size", d.vocab},
      {"n_positions", d.seq_len},
      {"n_ctx", d.seq_len},
      {"n_embd", d.d_model},
      {"n_layer", d.n_layer},
      {"n_head", d.n_head},
      {"n_inner", nullptr},  // 4 * n_embd
      {"activation_function", "gelu_new"},  // the tanh approximation, baton's GELU
      {"layer_norm_epsilon", kLayerNormEps},
      {"resid_pdrop", double(d.dropout)},
      {"embd_pdrop", double(d.dropout)},
      {"attn_pdrop", 0.0},
      {"initializer_range", 0.02},
      {"scale_attn_weights", true},
      {"scale_attn_by_inverse_layer_idx", false},
      {"reorder_and_upcast_attn", false},
      {"tie_word_embeddings", true},
      {"use_cache", true},
      {"bos_token_id", eos},
      {"eos_token_id", eos},
      {"torch_dtype", "float32"},
  };
}

HfExportResult export_hf_gpt2(CheckpointReader& ckpt, const GptDims& d, int eos_id, const std::string& out_dir) {
  const std::vector<HfTensor> map = hf_gpt2_tensors(d);
  // The checkpoint must hold exactly the GPT's parameters (a tensor GPT-2 has no place for would
  // be lost silently).
  std::set<std::string> known;
  for (const HfTensor& t : map) known.insert(std::string(kParams) + t.baton);
  for (const TensorInfo& ti : ckpt.tensors())
    BATON_REQUIRE(ti.name.rfind(kParams, 0) != 0 || known.count(ti.name),
                  fmt::format("checkpoint '{}' holds '{}', which GPT-2 (GPT2LMHeadModel) has no tensor for",
                              ckpt.path(), ti.name),
                  "only baton's GPT (model.kind = \"gpt\") exports to the Hugging Face format");
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  BATON_REQUIRE(!ec, fmt::format("cannot create '{}': {}", out_dir, ec.message()),
                "choose a writable output directory");
  std::vector<safetensors::WriteTensor> tensors;
  for (const HfTensor& t : map)
    tensors.push_back({t.hf, t.hf_shape, [&ckpt, t](float* dst) {
                         std::vector<float> full(size_t(numel_of(t.baton_shape)));
                         const TensorShard s = whole_tensor(kParams + t.baton, t.baton_shape, full.data());
                         ckpt.read(std::span<const TensorShard>(&s, 1));  // verified against its checksum
                         baton_to_hf(t, full.data(), dst);
                       }});
  HfExportResult r;
  r.tensors = int(tensors.size());
  r.bytes = safetensors::write_f32((fs::path(out_dir) / kWeights).string(), std::move(tensors), {{"format", "pt"}});
  const std::string cfg_path = (fs::path(out_dir) / kConfig).string();
  {
    std::ofstream f(cfg_path + ".tmp", std::ios::trunc);
    f << hf_gpt2_config(d, eos_id).dump(2) << "\n";
    f.flush();
    BATON_REQUIRE(f.good(), fmt::format("cannot write '{}.tmp'", cfg_path), "check the output directory's free space");
  }
  fs::rename(cfg_path + ".tmp", cfg_path);
  return r;
}

HfGpt2Source::HfGpt2Source(const std::string& dir) : dir_(dir) {
  const std::string hint = "give a Hugging Face GPT-2 directory holding config.json and model.safetensors (e.g. "
                           "written by `baton ckpt export CKPT --format hf DIR`, or transformers' save_pretrained)";
  BATON_REQUIRE(fs::is_directory(dir), fmt::format("model.init_from: '{}' is not a directory", dir), hint);
  const fs::path cfg = fs::path(dir) / kConfig;
  std::ifstream f(cfg);
  BATON_REQUIRE(f.good(), fmt::format("model.init_from: '{}' has no config.json", dir), hint);
  try {
    config_ = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("'{}' is not valid JSON: {}", cfg.string(), e.what()), hint);
  }
  BATON_REQUIRE(config_.is_object(), fmt::format("'{}' is not a JSON object", cfg.string()), hint);
  const fs::path single = fs::path(dir) / kWeights, index = fs::path(dir) / kIndex;
  if (fs::exists(single)) {
    files_.push_back(std::make_unique<safetensors::Reader>(single.string()));
  } else if (fs::exists(index)) {
    std::ifstream in(index);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw Error(fmt::format("'{}' is not valid JSON: {}", index.string(), e.what()), hint);
    }
    BATON_REQUIRE(j.contains("weight_map") && j["weight_map"].is_object(),
                  fmt::format("'{}' has no weight_map", index.string()), hint);
    std::set<std::string> names;
    for (const auto& [name, file] : j["weight_map"].items())
      if (file.is_string()) names.insert(file.get<std::string>());
    for (const std::string& n : names) {
      BATON_REQUIRE(n.find('/') == std::string::npos && n.find("..") == std::string::npos,
                    fmt::format("'{}' names a file outside the directory: '{}'", index.string(), n), hint);
      files_.push_back(std::make_unique<safetensors::Reader>((fs::path(dir) / n).string()));
    }
  } else {
    const bool pickle = fs::exists(fs::path(dir) / "pytorch_model.bin");
    throw Error(fmt::format("model.init_from: '{}' has no model.safetensors{}", dir,
                            pickle ? " (only pytorch_model.bin, a pickle baton does not read)" : ""),
                pickle ? "convert it once with transformers: GPT2LMHeadModel.from_pretrained(DIR)"
                         ".save_pretrained(DIR2) writes model.safetensors"
                       : hint);
  }
}

HfGpt2Source::~HfGpt2Source() = default;

std::string HfGpt2Source::describe() const {
  return fmt::format("{} (GPT-2 {} layers, n_embd {}, {} heads, n_positions {}, vocab {}; {} safetensors file{})", dir_,
                     config_value(config_, "n_layer", 12), config_value(config_, "n_embd", 768),
                     config_value(config_, "n_head", 12), config_value(config_, "n_positions", 1024),
                     config_value(config_, "vocab_size", 50257), files_.size(), files_.size() == 1 ? "" : "s");
}

void HfGpt2Source::check(const GptDims& d, const std::string& vocab_source) const {
  const std::string where = (fs::path(dir_) / kConfig).string();
  const std::string model_type = config_value<std::string>(config_, "model_type", "");
  BATON_REQUIRE(model_type == "gpt2",
                fmt::format("{}: model_type is \"{}\", not \"gpt2\"", where, model_type),
                "model.init_from loads GPT-2 (GPT2LMHeadModel) weights only");
  // The shape: it must be the config's model (the hint says which keys to set).
  std::vector<std::string> diff;
  auto same = [&](const char* hf_key, int fallback, int mine, const char* key) {
    const int theirs = config_value(config_, hf_key, fallback);
    if (theirs != mine) diff.push_back(fmt::format("{} = {} (config.json {} = {})", key, mine, hf_key, theirs));
  };
  same("n_layer", 12, d.n_layer, "model.n_layer");
  same("n_embd", 768, d.d_model, "model.d_model");
  same("n_head", 12, d.n_head, "model.n_head");
  BATON_REQUIRE(diff.empty(),
                fmt::format("model.init_from: '{}' is another model than the config: {}", dir_, fmt::join(diff, ", ")),
                fmt::format("set model.n_layer = {}, model.d_model = {}, model.n_head = {} (the directory's GPT-2)",
                            config_value(config_, "n_layer", 12), config_value(config_, "n_embd", 768),
                            config_value(config_, "n_head", 12)));
  const int vocab = config_value(config_, "vocab_size", 50257);
  BATON_REQUIRE(vocab == d.vocab,
                fmt::format("model.init_from: '{}' has vocab_size {}, the model's vocabulary ({}) is {}", dir_, vocab,
                            vocab_source, d.vocab),
                "train with the tokenizer the weights were trained with (its vocabulary must be the same size), or "
                "set model.vocab_size to config.json's vocab_size when the tokenizer is a subset of it");
  const int positions = config_value(config_, "n_positions", 1024);
  BATON_REQUIRE(positions >= d.seq_len,
                fmt::format("model.init_from: '{}' has n_positions {}, fewer than model.seq_len = {}", dir_,
                            positions, d.seq_len),
                fmt::format("set model.seq_len to at most {}", positions));
  const nlohmann::json inner = config_.contains("n_inner") ? config_["n_inner"] : nlohmann::json(nullptr);
  BATON_REQUIRE(inner.is_null() || (inner.is_number_integer() && inner.get<int64_t>() == 4 * int64_t(d.d_model)),
                fmt::format("{}: n_inner = {}, baton's MLP is 4 × n_embd = {}", where, inner.dump(), 4 * d.d_model),
                "baton's GPT has no other MLP width");
  const std::string act = config_value<std::string>(config_, "activation_function", "gelu_new");
  BATON_REQUIRE(act == "gelu_new" || act == "gelu_pytorch_tanh",
                fmt::format("{}: activation_function \"{}\", baton's GELU is the tanh approximation (\"gelu_new\")",
                            where, act),
                "baton cannot load a GPT-2 with another activation: its outputs would differ");
  const double eps = config_value(config_, "layer_norm_epsilon", 1e-5);
  BATON_REQUIRE(std::abs(eps - kLayerNormEps) <= 1e-12,
                fmt::format("{}: layer_norm_epsilon = {}, baton's layer norm uses {}", where, eps, kLayerNormEps),
                "baton cannot load a GPT-2 with another layer-norm epsilon: its outputs would differ");
  BATON_REQUIRE(config_value(config_, "scale_attn_weights", true) &&
                    !config_value(config_, "scale_attn_by_inverse_layer_idx", false) &&
                    !config_value(config_, "add_cross_attention", false),
                fmt::format("{}: the attention is not GPT-2's (scale_attn_weights = true, "
                            "scale_attn_by_inverse_layer_idx = false, add_cross_attention = false)", where),
                "baton's attention is softmax(q·k / sqrt(head size)): it cannot load another");
}

std::pair<const safetensors::Reader*, std::string> HfGpt2Source::locate(const std::string& hf_name) const {
  // GPT2LMHeadModel's names ("transformer.wte.weight"), or GPT2Model's ("wte.weight", as in the
  // original openai-community/gpt2 files).
  const std::string base = hf_name.rfind("transformer.", 0) == 0 ? hf_name.substr(12) : hf_name;
  for (const std::string& n : {hf_name, base})
    for (const auto& f : files_)
      if (f->find(n)) return {f.get(), n};
  return {nullptr, ""};
}

std::vector<float> HfGpt2Source::load(const HfTensor& t) const {
  const auto [file, name] = locate(t.hf);
  BATON_REQUIRE(file, fmt::format("model.init_from: '{}' has no tensor '{}' (for baton's '{}')", dir_, t.hf, t.baton),
                "the directory's weights are not a complete GPT-2 (GPT2LMHeadModel) state dict");
  const safetensors::Entry& e = *file->find(name);
  std::vector<int64_t> want = t.hf_shape;
  bool ok = e.shape == want;
  if (t.kind == HfTensor::Kind::POSITION_ROWS)  // any n_positions >= T: the first T rows
    ok = e.shape.size() == 2 && e.shape[0] >= want[0] && e.shape[1] == want[1];
  BATON_REQUIRE(ok,
                fmt::format("model.init_from: tensor '{}' of '{}' has shape {}, the model needs {}", name, file->path(),
                            shape_str(e.shape), shape_str(want)),
                "the safetensors file does not match its config.json");
  const std::vector<float> hf = file->read_f32(e);
  std::vector<float> full(size_t(numel_of(t.baton_shape)));
  hf_to_baton(t, hf.data(), full.data());
  if (t.kind == HfTensor::Kind::VOCAB_ROWS) {
    // A separate lm_head (tie_word_embeddings = false, or a file that stores it anyway) must be
    // the embedding: baton's head is tied to it.
    const auto [hf_file, hname] = locate("lm_head.weight");
    if (hf_file) {
      const safetensors::Entry& h = *hf_file->find(hname);
      const bool tied = h.shape == e.shape && hf_file->read_f32(h) == hf;
      BATON_REQUIRE(tied, fmt::format("model.init_from: '{}' has an lm_head.weight that is not transformer.wte.weight", dir_),
                    "baton's GPT ties its output head to the token embedding; untied GPT-2 heads cannot be loaded");
    } else {
      BATON_REQUIRE(config_value(config_, "tie_word_embeddings", true),
                    fmt::format("model.init_from: '{}' has tie_word_embeddings = false but no lm_head.weight", dir_),
                    "the directory is incomplete");
    }
  }
  return full;
}

void HfGpt2Source::read(std::span<const TensorShard> shards, const GptDims& d) const {
  const std::vector<HfTensor> map = hf_gpt2_tensors(d);
  std::map<std::string, const HfTensor*> by_name;
  for (const HfTensor& t : map) by_name[std::string(kParams) + t.baton] = &t;
  // Every tensor of the files must have a place (a tensor of another architecture would be
  // silently dropped otherwise).
  std::set<std::string> expected{"lm_head.weight"};
  for (const HfTensor& t : map) {
    expected.insert(t.hf);
    expected.insert(t.hf.substr(12));
  }
  for (const auto& f : files_)
    for (const safetensors::Entry& e : f->tensors())
      BATON_REQUIRE(expected.count(e.name) || ignorable_buffer(e.name),
                    fmt::format("model.init_from: '{}' holds tensor '{}', which baton's GPT-2 of {} layers has no "
                                "place for", f->path(), e.name, d.n_layer),
                    "the directory's model is not a GPT2LMHeadModel of the config's shape");
  // Shards of one tensor (a fused q|k|v weight is one box per block) share its conversion.
  std::vector<const TensorShard*> order;
  for (const TensorShard& s : shards) order.push_back(&s);
  std::stable_sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->name < b->name; });
  std::string cached;
  std::vector<float> full;
  for (const TensorShard* s : order) {
    const auto it = by_name.find(s->name);
    BATON_ASSERT(it != by_name.end(), "'{}' is not a GPT-2 parameter", s->name);
    const HfTensor& t = *it->second;
    BATON_ASSERT(s->full_shape == t.baton_shape, "'{}': shape {} vs the mapping's {}", s->name,
                 shape_str(s->full_shape), shape_str(t.baton_shape));
    if (cached != s->name) {
      full = load(t);
      cached = s->name;
    }
    copy_box(full.data(), t.baton_shape, s->offset, s->extent, s->host_data);
  }
}

}  // namespace baton
