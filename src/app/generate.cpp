// `baton generate --checkpoint PATH|DIR --prompt TEXT`: rebuilds the model from the config stored in
// an HDF5 checkpoint (a directory means its newest complete checkpoint), loads the parameters
// (verified against their checksums) and samples a continuation.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "app/app.h"
#include "backend/device.h"
#include "config/config.h"
#include "core/error.h"
#include "data/tokenizer.h"
#include "model/gpt.h"
#include "train/checkpoint/checkpoint_dir.h"
#include "train/checkpoint/checkpoint_state.h"
#include "train/loop/sampler.h"

namespace baton::app {

int run_generate(const GenerateOptions& opts) {
  const std::string path = resolve_checkpoint(opts.checkpoint);
  CheckpointReader reader(path);
  Config cfg = load_config_string(reader.meta().config_toml, path + " (stored config)", {},
                                  static_cast<int>(reader.meta().layout.world));
  // The checkpoint config's tokenizer, each part replaced by its option when given (a run trained
  // elsewhere keeps its tokenizer and names files that moved).
  TokenizerSpec spec{cfg.data.tokenizer, cfg.data.vocab_file, cfg.data.merge_file};
  if (!opts.tokenizer.empty()) spec = TokenizerSpec{opts.tokenizer, {}, {}};
  if (!opts.vocab_file.empty()) spec.vocab_file = opts.vocab_file;
  if (!opts.merge_file.empty()) spec.merge_file = opts.merge_file;
  BATON_REQUIRE(!spec.tokenizer.empty(), fmt::format("'{}' names no tokenizer", path),
                "pass --tokenizer MODEL (the SentencePiece .model the dataset was built with), or "
                "--tokenizer gpt2-bpe --vocab-file encoder.json --merge-file vocab.bpe");
  auto tokenizer = Tokenizer::load(spec);
  const GptDims dims = gpt_dims(cfg.model, tokenizer->vocab_size());
  BackendChoice choice = choose_backend(cfg.precision.device == "cuda" ? "auto" : cfg.precision.device);
  SequentialModel model(make_gpt(dims), *choice.backend);
  std::vector<float> host(model.table().total());
  reader.read(table_shards(model.table(), host.data(), kParamsGroup));
  choice.backend->to_device(model.params(), host.data(), host.size() * sizeof(float));
  model.refresh_compute_params();

  SampleOptions so;
  so.tokens = opts.tokens;
  so.temperature = opts.temperature;
  so.top_k = opts.top_k;
  so.seed = opts.seed;
  std::vector<int32_t> ids = tokenizer->encode(opts.prompt);
  if (!opts.logits.empty()) {
    // The prompt's logits (its first seq_len tokens, one forward pass) for comparisons with other
    // implementations (tests/e2e/test_hf_interop.sh: a PyTorch GPT-2 on the exported weights).
    BATON_REQUIRE(!ids.empty(), "the prompt encodes to no tokens", "give a non-empty --prompt");
    const int T = static_cast<int>(std::min<size_t>(ids.size(), dims.seq_len));
    model.reserve(1, dims.seq_len, 1);
    model.forward(0, MicroBatch{.B = 1, .T = T, .tokens = ids.data()}, false, 0.0f);
    nlohmann::json rows = nlohmann::json::array();
    std::vector<float> row(dims.vocab_padded);
    for (int t = 0; t < T; ++t) {
      gpt_logits_row_to_host(model, 0, t, row.data());
      rows.push_back(std::vector<float>(row.begin(), row.begin() + dims.vocab));
    }
    std::ofstream out(opts.logits);
    out << nlohmann::json{{"tokens", std::vector<int32_t>(ids.begin(), ids.begin() + T)}, {"logits", rows}}.dump() << "\n";
    BATON_REQUIRE(out.good(), fmt::format("cannot write {}", opts.logits), "check that the directory is writable");
  }
  const std::vector<int32_t> more = sample_tokens(model, ids, so);
  ids.insert(ids.end(), more.begin(), more.end());
  std::printf("%s\n", tokenizer->decode(ids).c_str());
  return 0;
}

}  // namespace baton::app
