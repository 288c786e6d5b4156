// The training state of one process as checkpoint shards: the parameters and AdamW moments of a
// model laid out by a ParamTable, as host copies of the flat buffers, under the dataset names
// "params/<name>", "optim/m/<name>", "optim/v/<name>"; and the checkpoint metadata of a config at a
// step. Today a process holds whole tensors; tensor- and pipeline-parallel layouts will describe
// their boxes here (offset along tp_dim) without touching the file format.
#pragma once
#include <string>
#include <vector>

#include "config/config.h"
#include "model/gpt_model.h"
#include "model/param_table.h"
#include "optim/adamw.h"
#include "train/checkpoint.h"
#include "train/checkpoint_dir.h"

namespace baton {

inline constexpr const char* kParamsGroup = "params/";
inline constexpr const char* kAdamMGroup = "optim/m/";
inline constexpr const char* kAdamVGroup = "optim/v/";

// One shard per parameter of `table`, viewing the flat host buffer `flat`, named group + name.
std::vector<TensorShard> table_shards(const ParamTable& table, float* flat, const std::string& group);

// Host copies of the state a resumed run needs bit for bit.
struct HostTrainState {
  explicit HostTrainState(const ParamTable& table);
  std::vector<float> params, m, v;  // flat, laid out by the table
  // Shards of all three groups over the buffers above.
  std::vector<TensorShard> shards(const ParamTable& table);
};

// Metadata for a checkpoint of `cfg` after `step` optimizer steps, the last with rate `last_lr`.
CheckpointMeta make_checkpoint_meta(const Config& cfg, int64_t step, double last_lr);

// Copies the parameters and AdamW moments to `host` and saves them into cfg.checkpoint_dir().
// SaveResult::seconds covers the copies too: it is how long training is blocked.
SaveResult save_train_state(const Config& cfg, GptModel& model, AdamW& opt, HostTrainState& host,
                            int64_t step, double last_lr);
// Reads and verifies the whole state of checkpoint `path` into `host`; the model is not touched,
// so a damaged file leaves training state as it was. Returns the metadata.
CheckpointMeta read_train_state(const std::string& path, const ParamTable& table, HostTrainState& host);
// Copies `host` into the model's parameters and the optimizer's moments.
void restore_train_state(HostTrainState& host, GptModel& model, AdamW& opt);

}  // namespace baton
