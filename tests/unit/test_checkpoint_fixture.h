// Shared by the test_checkpoint_*.cpp tests: a scratch directory and the full training state
// (parameters, AdamW m and v) of a small GPT with distinct values in every tensor.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <string>

#include "backend/device.h"
#include "model/gpt.h"
#include "train/checkpoint/checkpoint_state.h"

namespace baton::testing {

class TmpDir {
 public:
  TmpDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "baton-ckpt-XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TmpDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline ModelConfig small_gpt_config(int d_model = 32) {
  ModelConfig m;
  m.n_layer = 2;
  m.n_head = 2;
  m.d_model = d_model;
  m.seq_len = 16;
  m.vocab_size = 200;
  return m;
}

// A small GPT's state on the host; `variant` changes every value (a "later step").
struct SmallState {
  explicit SmallState(int d_model = 32, float variant = 0)
      : backend(choose_backend("cpu")), model(make_gpt(gpt_dims(small_gpt_config(d_model), 0)), *backend.backend),
        host(model.table()) {
    model.init_weights(7);
    backend.backend->to_host(host.params.data(), model.params(), host.params.size() * sizeof(float));
    for (size_t i = 0; i < host.params.size(); ++i) {
      host.params[i] += variant;
      host.optim[0].flat[i] = 0.5f * host.params[i] + 1e-3f * float(i % 97);  // AdamW's m
      host.optim[1].flat[i] = host.params[i] * host.params[i] + 1e-4f * float(i % 89);  // v
    }
  }
  std::vector<TensorShard> shards() { return host.shards(model.table()); }
  const ParamTable& table() const { return model.table(); }

  BackendChoice backend;
  SequentialModel model;
  HostTrainState host;
};

inline CheckpointMeta test_meta(int64_t step) {
  Config cfg;
  cfg.model = small_gpt_config();
  cfg.train.steps = 100;
  return make_checkpoint_meta(cfg, step, 1e-3 * double(step));
}

}  // namespace baton::testing
