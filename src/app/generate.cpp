// `baton generate --checkpoint PATH|DIR --prompt TEXT`: rebuilds the model from the config stored in
// an HDF5 checkpoint (a directory means its newest complete checkpoint), loads the parameters
// (verified against their checksums) and samples a continuation.
#include <cstdio>

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
  Config cfg = load_config_string(reader.meta().config_toml, path + " (stored config)");
  const std::string tok_path = opts.tokenizer.empty() ? cfg.data.tokenizer : opts.tokenizer;
  BATON_REQUIRE(!tok_path.empty(), fmt::format("'{}' names no tokenizer", path),
                "pass --tokenizer MODEL (the SentencePiece .model the dataset was built with)");
  auto tokenizer = Tokenizer::load(tok_path);
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
  const std::vector<int32_t> more = sample_tokens(model, ids, so);
  ids.insert(ids.end(), more.begin(), more.end());
  std::printf("%s\n", tokenizer->decode(ids).c_str());
  return 0;
}

}  // namespace baton::app
