// Hugging Face GPT-2 interop (train/checkpoint/hf_gpt2.h) and its safetensors reader/writer: the
// file layout the reference implementation writes, malformed files refused, the name mapping and
// Conv1D orientation of an export, an import into every tensor-parallel rank's boxes (fused q|k|v
// blocks included) bit for bit, GPT2Model's base names and a tied lm_head accepted, and
// config.json's that describe another model refused. The PyTorch comparison and the CLI are in
// tests/e2e/test_hf_interop.sh.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <fstream>
#include <map>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "test_checkpoint_fixture.h"
#include "train/checkpoint/hf_gpt2.h"
#include "train/checkpoint/safetensors.h"

namespace baton {
namespace {

using testing::SmallState;
using testing::TmpDir;

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// A safetensors file from a JSON header and raw data, exactly as given (no padding).
std::string raw_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

TEST(Safetensors, WritesThePaddedHeaderAndNameOrderAndReadsBack) {
  TmpDir dir;
  const std::string path = dir / "t.safetensors";
  const std::vector<float> a = {1, 2, 3, 4, 5}, b = {-1, 0.5f, 7, 8, 9, 10};
  const uint64_t bytes = safetensors::write_f32(
      path,
      {{"b", {2, 3}, [&](float* d) { std::copy(b.begin(), b.end(), d); }},
       {"a", {5}, [&](float* d) { std::copy(a.begin(), a.end(), d); }}},
      {{"format", "pt"}});
  const std::string file = read_file(path);
  ASSERT_EQ(file.size(), bytes);
  uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  EXPECT_EQ(n % 8, 0u) << "header padded to a multiple of 8";
  EXPECT_EQ(file.size(), 8 + n + 4 * (5 + 6));
  const auto header = nlohmann::json::parse(file.substr(8, n));
  EXPECT_EQ(header.begin().key(), "__metadata__");
  EXPECT_EQ(header["a"]["data_offsets"], nlohmann::json({0, 20}));  // name order
  EXPECT_EQ(header["b"]["data_offsets"], nlohmann::json({20, 44}));
  EXPECT_EQ(header["b"]["shape"], nlohmann::json({2, 3}));
  EXPECT_EQ(header["b"]["dtype"], "F32");

  safetensors::Reader r(path);
  EXPECT_EQ(r.metadata().at("format"), "pt");
  ASSERT_EQ(r.tensors().size(), 2u);
  EXPECT_EQ(r.tensors()[0].name, "a");
  EXPECT_EQ(r.read_f32(*r.find("a")), a);
  EXPECT_EQ(r.read_f32(*r.find("b")), b);
  EXPECT_EQ(r.find("c"), nullptr);
}

TEST(Safetensors, ConvertsHalfPrecisionTensors) {
  TmpDir dir;
  // F16: 1.0 = 0x3c00, -2.5 = 0xc100, 2^-24 (smallest subnormal) = 0x0001; BF16: 1.5 = 0x3fc0.
  const uint16_t f16[3] = {0x3c00, 0xc100, 0x0001}, bf16[1] = {0x3fc0};
  std::string data(reinterpret_cast<const char*>(f16), 6);
  data += std::string(reinterpret_cast<const char*>(bf16), 2);
  write_file(dir / "h.safetensors",
             raw_file(R"({"h":{"dtype":"F16","shape":[3],"data_offsets":[0,6]},"b":{"dtype":"BF16","shape":[1],"data_offsets":[6,8]}})",
                      data));
  safetensors::Reader r(dir / "h.safetensors");
  EXPECT_EQ(r.read_f32(*r.find("h")), (std::vector<float>{1.0f, -2.5f, std::ldexp(1.0f, -24)}));
  EXPECT_EQ(r.read_f32(*r.find("b")), std::vector<float>{1.5f});
}

TEST(Safetensors, RefusesMalformedFiles) {
  TmpDir dir;
  const std::string ok = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::map<std::string, std::string> bad = {
      {"short", std::string(5, '\0')},
      {"header past the end", raw_file(ok, "").substr(0, 20)},
      {"not json", raw_file("{nope", std::string(8, '\0'))},
      {"range past the data", raw_file(ok, std::string(4, '\0'))},
      {"range vs shape", raw_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0'))},
      {"unknown dtype", raw_file(R"({"a":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", std::string(8, '\0'))},
      {"no offsets", raw_file(R"({"a":{"dtype":"F32","shape":[2]}})", std::string(8, '\0'))},
  };
  for (const auto& [what, bytes] : bad) {
    write_file(dir / "bad", bytes);
    try {
      safetensors::Reader r(dir / "bad");
      ADD_FAILURE() << what << ": accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("not a valid safetensors file"), std::string::npos) << what << ": " << e.what();
      EXPECT_FALSE(e.hint().empty());
    }
  }
  write_file(dir / "good", raw_file(ok, std::string(8, '\0')));
  EXPECT_NO_THROW(safetensors::Reader(dir / "good"));
}

// A small GPT's checkpoint, exported.
struct Exported {
  Exported() {
    write_checkpoint_file(dir / "c.h5", testing::test_meta(5), state.shards(), MPI_COMM_NULL);
    CheckpointReader r(dir / "c.h5");
    dims = gpt_dims_of(state.model);
    result = export_hf_gpt2(r, dims, 3, dir / "hf");
  }
  // The parameter `name` as the checkpoint holds it (full tensor: this model has tp = 1).
  std::vector<float> param(const std::string& name) const {
    const int i = state.table().find(name);
    const float* p = state.table().at(state.host.params.data(), i);
    return {p, p + state.table().numel(i)};
  }
  TmpDir dir;
  SmallState state;
  GptDims dims;
  HfExportResult result;
};

TEST(HfGpt2, ExportHasGpt2NamesConv1dOrientationAndNoPadding) {
  Exported x;
  const GptDims& d = x.dims;  // C 32, V 200 (Vp 256), T 16, L 2
  const int64_t C = d.d_model;
  safetensors::Reader r(x.dir / "hf/model.safetensors");
  EXPECT_EQ(x.result.tensors, 4 + 12 * d.n_layer);
  EXPECT_EQ(r.tensors().size(), size_t(4 + 12 * d.n_layer));
  EXPECT_EQ(r.find("lm_head.weight"), nullptr) << "tied to wte: not stored, as save_pretrained does";
  const safetensors::Entry* wte = r.find("transformer.wte.weight");
  ASSERT_TRUE(wte);
  EXPECT_EQ(wte->shape, (std::vector<int64_t>{d.vocab, C}));
  const std::vector<float> w = x.param("wte"), hw = r.read_f32(*wte);
  EXPECT_TRUE(std::equal(hw.begin(), hw.end(), w.begin())) << "the first V rows of wte";
  // Conv1D weights are [in, out], baton's linears [out, in]: hf[k][o] = baton[o][k] for all four.
  for (const auto& [baton_name, hf_name, out, in] :
       std::vector<std::tuple<std::string, std::string, int64_t, int64_t>>{
           {"h.1.attn.qkv.weight", "transformer.h.1.attn.c_attn.weight", 3 * C, C},
           {"h.1.attn.proj.weight", "transformer.h.1.attn.c_proj.weight", C, C},
           {"h.0.mlp.fc.weight", "transformer.h.0.mlp.c_fc.weight", 4 * C, C},
           {"h.0.mlp.proj.weight", "transformer.h.0.mlp.c_proj.weight", C, 4 * C}}) {
    const safetensors::Entry* e = r.find(hf_name);
    ASSERT_TRUE(e) << hf_name;
    EXPECT_EQ(e->shape, (std::vector<int64_t>{in, out})) << hf_name;
    const std::vector<float> b = x.param(baton_name), h = r.read_f32(*e);
    for (int64_t o = 0; o < out; ++o)
      for (int64_t k = 0; k < in; ++k) ASSERT_EQ(h[k * out + o], b[o * in + k]) << hf_name << " " << o << "," << k;
  }
  EXPECT_EQ(r.read_f32(*r.find("transformer.ln_f.bias")), x.param("lnf.bias"));

  const auto cfg = nlohmann::json::parse(read_file(x.dir / "hf/config.json"));
  EXPECT_EQ(cfg["model_type"], "gpt2");
  EXPECT_EQ(cfg["architectures"], nlohmann::json({"GPT2LMHeadModel"}));
  EXPECT_EQ(cfg["vocab_size"], d.vocab);
  EXPECT_EQ(cfg["n_positions"], d.seq_len);
  EXPECT_EQ(cfg["n_embd"], C);
  EXPECT_EQ(cfg["activation_function"], "gelu_new");
  EXPECT_EQ(cfg["layer_norm_epsilon"], 1e-5);
  EXPECT_EQ(cfg["eos_token_id"], 3);
  EXPECT_EQ(cfg["tie_word_embeddings"], true);
}

// Reads every parameter of the exported GPT into the boxes tensor-parallel rank `rank` of `tp`
// holds and compares them with the boxes of the original (wte's padding rows zero).
void expect_import_matches(const Exported& x, const HfGpt2Source& src, int tp) {
  for (int rank = 0; rank < tp; ++rank) {
    std::vector<ParamSpec> specs;
    std::vector<std::vector<float>> got, want;
    std::vector<TensorShard> shards;
    for (int i = 0; i < x.state.table().size(); ++i) {
      ParamSpec s = x.state.table().spec(i);
      if (s.tp_dim >= 0) s.shape[s.tp_dim] /= tp;
      specs.push_back(s);
    }
    for (const ParamSpec& s : specs) {
      int64_t n = 1;
      for (int64_t e : s.shape) n *= e;
      got.emplace_back(size_t(n), -7.0f);
      std::vector<float> full = x.param(s.name);
      if (s.name == "wte") std::fill(full.begin() + int64_t(x.dims.vocab) * x.dims.d_model, full.end(), 0.0f);
      want.emplace_back(size_t(n));
      extract_shard(s, rank, tp, full.data(), want.back().data());
    }
    for (size_t i = 0; i < specs.size(); ++i)
      for (const ShardBox& b : shard_boxes(specs[i], rank, tp))
        shards.push_back({.name = "params/" + specs[i].name, .full_shape = full_shape(specs[i], tp),
                          .offset = b.offset, .extent = b.extent, .host_data = got[i].data() + b.local_offset});
    src.read(shards, x.dims);
    for (size_t i = 0; i < specs.size(); ++i)
      EXPECT_EQ(got[i], want[i]) << specs[i].name << " on tensor-parallel rank " << rank << " of " << tp;
  }
}

TEST(HfGpt2, ImportFillsEveryTensorParallelRanksBoxes) {
  Exported x;
  HfGpt2Source src(x.dir / "hf");
  EXPECT_NO_THROW(src.check(x.dims, "model.vocab_size"));
  for (int tp : {1, 2, 4}) expect_import_matches(x, src, tp);
}

TEST(HfGpt2, ImportAcceptsBaseModelNamesMaskBuffersAndATiedHead) {
  Exported x;
  // GPT2Model's names (the original openai-community/gpt2 file), its causal-mask buffers, and an
  // lm_head.weight equal to wte.
  safetensors::Reader r(x.dir / "hf/model.safetensors");
  std::vector<safetensors::WriteTensor> ts;
  std::vector<std::vector<float>> keep;
  keep.reserve(r.tensors().size());  // the fills below point into it
  for (const safetensors::Entry& e : r.tensors()) {
    keep.push_back(r.read_f32(e));
    const std::vector<float>& v = keep.back();
    auto fill = [&v](float* d) { std::copy(v.begin(), v.end(), d); };
    ts.push_back({e.name.substr(12), e.shape, fill});
    if (e.name == "transformer.wte.weight") ts.push_back({"lm_head.weight", e.shape, fill});
  }
  ts.push_back({"h.0.attn.bias", {1, 1, 16, 16}, [](float* d) { std::fill(d, d + 256, 1.0f); }});
  std::filesystem::create_directories(x.dir / "base");
  std::filesystem::copy_file(x.dir / "hf/config.json", x.dir / "base/config.json");
  safetensors::write_f32(x.dir / "base/model.safetensors", ts, {{"format", "pt"}});
  expect_import_matches(x, HfGpt2Source(x.dir / "base"), 2);

  // An lm_head that is not wte: baton's head is tied, so it is refused.
  ts.erase(std::remove_if(ts.begin(), ts.end(), [](auto& t) { return t.name == "lm_head.weight"; }), ts.end());
  ts.push_back({"lm_head.weight", {x.dims.vocab, x.dims.d_model}, [&](float* d) {
                  std::fill(d, d + int64_t(x.dims.vocab) * x.dims.d_model, 0.25f);
                }});
  safetensors::write_f32(x.dir / "base/model.safetensors", ts, {{"format", "pt"}});
  try {
    expect_import_matches(x, HfGpt2Source(x.dir / "base"), 1);
    ADD_FAILURE() << "an untied lm_head was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lm_head.weight that is not transformer.wte.weight"), std::string::npos)
        << e.what();
  }
}

TEST(HfGpt2, CheckRefusesConfigsOfAnotherModel) {
  Exported x;
  const auto base = nlohmann::json::parse(read_file(x.dir / "hf/config.json"));
  const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> cases = {
      {[](auto& c) { c["n_embd"] = 64; }, "is another model than the config: model.d_model = 32 (config.json n_embd = 64)"},
      {[](auto& c) { c["n_layer"] = 3; }, "model.n_layer = 2 (config.json n_layer = 3)"},
      {[](auto& c) { c["vocab_size"] = 50257; }, "has vocab_size 50257, the model's vocabulary (model.vocab_size) is 200"},
      {[](auto& c) { c["n_positions"] = 8; }, "has n_positions 8, fewer than model.seq_len = 16"},
      {[](auto& c) { c["activation_function"] = "gelu"; }, "activation_function \"gelu\""},
      {[](auto& c) { c["layer_norm_epsilon"] = 1e-6; }, "layer_norm_epsilon = 1e-06"},
      {[](auto& c) { c["n_inner"] = 100; }, "n_inner = 100"},
      {[](auto& c) { c["scale_attn_by_inverse_layer_idx"] = true; }, "the attention is not GPT-2's"},
      {[](auto& c) { c["model_type"] = "llama"; }, "model_type is \"llama\""},
  };
  for (const auto& [edit, want] : cases) {
    nlohmann::json c = base;
    edit(c);
    write_file(x.dir / "hf/config.json", c.dump());
    try {
      HfGpt2Source(x.dir / "hf").check(x.dims, "model.vocab_size");
      ADD_FAILURE() << want << ": accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
      EXPECT_FALSE(e.hint().empty());
    }
  }
  // Not a model directory.
  try {
    HfGpt2Source src(x.dir.path());
    ADD_FAILURE() << "a directory without config.json was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no config.json"), std::string::npos) << e.what();
  }
  // Defaults of GPT2Config for absent keys; more positions than seq_len is fine (the first T).
  nlohmann::json c = base;
  c.erase("activation_function");
  c.erase("layer_norm_epsilon");
  c["n_positions"] = 1024;
  write_file(x.dir / "hf/config.json", c.dump());
  EXPECT_NO_THROW(HfGpt2Source(x.dir / "hf").check(x.dims, "model.vocab_size"));
}

}  // namespace
}  // namespace baton
