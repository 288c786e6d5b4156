// The training state of one process as checkpoint shards: the parameters and optimizer state of a
// model laid out by a ParamTable, as host copies of the flat buffers, under the dataset names
// "params/<name>" and the optimizer's groups (AdamW: "optim/m/<name>", "optim/v/<name>"; SGD:
// "optim/momentum/<name>"), and its non-trainable buffers (batch-norm statistics) as
// "buffers/<name>"; and the checkpoint metadata of a config at a step. Under tensor parallelism each rank's shards are the boxes of the full tensors it holds
// (shard_boxes()); under data parallelism replica 0 writes and every replica reads; with ZeRO-1
// the optimizer state is gathered over data-parallel ranks for the save and each rank keeps its
// pieces on load. A checkpoint therefore loads under any other layout.
#pragma once
#include <string>
#include <vector>

#include "config/config.h"
#include "dist/layout.h"
#include "model/sequential_model.h"
#include "model/param_table.h"
#include "optim/adamw.h"
#include "optim/optimizer.h"
#include "optim/data_parallel.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/checkpoint_dir.h"

namespace baton {

inline constexpr const char* kParamsGroup = "params/";
inline constexpr const char* kAdamMGroup = "optim/m/";
inline constexpr const char* kAdamVGroup = "optim/v/";
inline constexpr const char* kBuffersGroup = "buffers/";

// This rank's place in the parallel layout, as checkpoints see it. The default is one process.
struct ShardLayout {
  int tp_rank = 0, tp_size = 1;
  bool writes = true;             // data-parallel replica 0 writes; the others join collectives
  MPI_Comm comm = MPI_COMM_NULL;  // every rank writing the file (the job's, or a VW's), when several
  std::string dir;                // where the files go ("": checkpoint.dir)
  DataParallelGrads* dp = nullptr;  // optimizer-state layout (ZeRO-1); null: laid out like params
  dist::Comm* tp = nullptr;  // tensor-parallel group: partial reads are verified together
  // Parameters whose copy another rank writes (a tied parameter on the stage that does not own
  // it, e.g. the last stage's wte: the first stage writes it, both read it).
  std::vector<int> copies;
};

// This rank's ShardLayout, from the Layout: tensor-parallel boxes; data-parallel group 0 (every
// virtual worker: each has its file) and replica 0 of a stage write; tied copies are read, not
// written. `comm`: the ranks of the file (MPI_COMM_NULL for one process); `dir` where it goes.
ShardLayout shard_layout(const dist::Layout& layout, int rank, const SequentialModel& model,
                         MPI_Comm comm, DataParallelGrads* dp, dist::Comm* tp, std::string dir);

// Shards of every parameter of `table` over the flat host buffer `flat`, named group + name: the
// boxes of the full tensors this tensor-parallel rank holds. `writing`: replicated parameters are
// written by tensor-parallel rank 0 only.
std::vector<TensorShard> table_shards(const ParamTable& table, float* flat, const std::string& group,
                                      const ShardLayout& layout = {}, bool writing = false);

// Host copies of the state a resumed run needs bit for bit.
struct HostTrainState {
  // `flat_size`: length of the flat buffers (>= table.total(); 0 = table.total()). `optim_groups`:
  // the optimizer's state tensors' checkpoint groups (Optimizer::state(); AdamW's by default).
  explicit HostTrainState(const ParamTable& table, size_t flat_size = 0,
                          std::vector<std::string> optim_groups = {kAdamMGroup, kAdamVGroup});
  struct OptimState {
    std::string group;        // e.g. "optim/m/"
    std::vector<float> flat;  // laid out by the table
  };
  std::vector<float> params;         // flat, laid out by the table
  std::vector<OptimState> optim;     // the optimizer's state tensors, in Optimizer::state() order
  std::vector<float> buffers;        // the non-trainable buffers, laid out by the table
  std::vector<float> state;          // staging of the optimizer's own (ZeRO-1) layout
  // Shards of every group over the buffers above.
  std::vector<TensorShard> shards(const ParamTable& table, const ShardLayout& layout = {},
                                  bool writing = false);
};

// Metadata for a checkpoint of `cfg` after `step` optimizer steps, the last with rate `last_lr`.
// Where a run stands besides its tensors: the data position runs ahead of the step by the batches
// rewinds skipped (train.on_spike = "rewind"); the divergence guard's history.
struct RunPosition {
  int64_t data_offset = 0;
  std::string guard_state;
};
CheckpointMeta make_checkpoint_meta(const Config& cfg, int64_t step, double last_lr, const RunPosition& pos = {});

// Copies the parameters, buffers and optimizer state to `host` and saves them into
// cfg.checkpoint_dir().
// SaveResult::seconds covers the copies too: it is how long training is blocked.
// Collective over layout.comm when it is set.
SaveResult save_train_state(const Config& cfg, SequentialModel& model, Optimizer& opt, HostTrainState& host,
                            int64_t step, double last_lr, const ShardLayout& layout = {},
                            const RunPosition& pos = {});
// Reads and verifies the whole state of checkpoint `path` into `host`; the model is not touched,
// so a damaged file leaves training state as it was. Tensors split over tensor-parallel ranks are
// verified by summing the ranks' partial checksums (collective over layout.tp). Returns the
// metadata.
CheckpointMeta read_train_state(const std::string& path, const ParamTable& table, HostTrainState& host,
                                const ShardLayout& layout = {});
// Copies `host` into the model's parameters and buffers and the optimizer's state (this rank's
// pieces).
void restore_train_state(HostTrainState& host, SequentialModel& model, Optimizer& opt,
                         const ShardLayout& layout = {});

}  // namespace baton
