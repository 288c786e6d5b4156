// HDF5 checkpoint files (DESIGN §6, docs/checkpoints.md). One file holds every tensor of the
// training state as its FULL LOGICAL tensor (dataset "params/<name>", "optim/m/<name>",
// "optim/v/<name>", float32, C order) plus metadata as attributes of the root group. A process
// writes and reads only the pieces it holds, described as TensorShards (a box of the full tensor),
// so a file written under one parallel layout is read under another by choosing other boxes:
// resharding is just a read with different hyperslabs.
//
// This file is the file format only; the step-NNNNNNN.h5 naming, atomic rename, `latest` pointer
// and pruning live in checkpoint_dir.h.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"

namespace baton {

// Version 1: the layout described in docs/checkpoints.md. Readers reject other versions.
inline constexpr int64_t kCheckpointFormatVersion = 1;
inline constexpr const char* kCheckpointFormatName = "baton-checkpoint";

// A box of a tensor held by this process: elements [offset[d], offset[d] + extent[d]) along every
// dimension d of the full tensor of shape full_shape, stored contiguously in C order at host_data.
// `name` is the dataset path in the file ("params/wte"). For writing, the shards of all ranks must
// partition each tensor (replicas hold the same data: exactly one of them passes it); for reading,
// boxes may overlap and may be empty.
struct TensorShard {
  std::string name;
  std::vector<int64_t> full_shape;
  std::vector<int64_t> offset;
  std::vector<int64_t> extent;
  float* host_data = nullptr;

  int64_t numel() const;       // elements in the box
  int64_t full_numel() const;  // elements in the full tensor
};
// The whole tensor as one shard.
TensorShard whole_tensor(std::string name, std::vector<int64_t> shape, float* data);

// The parallel layout that wrote a checkpoint (informational: any layout can read it).
struct CheckpointLayout {
  int64_t tp = 1, dp = 1, pp = 1, world = 1;
};

// The LR schedule is a pure function of the step (optim/lr_schedule.h); its state is its
// parameters plus the step, and the rate of the last step taken.
struct LrScheduleState {
  std::string decay;
  double lr = 0, min_lr = 0, last_lr = 0;
  int64_t warmup_steps = 0, total_steps = 0;
};

struct CheckpointMeta {
  int64_t format_version = kCheckpointFormatVersion;
  int64_t step = 0;             // optimizer steps completed; training continues with step index `step`
  int64_t tokens_consumed = 0;  // training tokens seen by those steps (all ranks)
  int64_t data_position = 0;    // the loader's next step: data order is a pure function of (seed, step)
  uint64_t seed = 0;            // the only RNG state: weights and data are counter-based in (seed, ...)
  LrScheduleState lr;
  std::string config_toml;      // the resolved config that was training
  CheckpointLayout layout;
  std::string created;          // ISO 8601 UTC; set by the writer
  std::string writer;           // "baton X.Y.Z"; set by the writer
  // The divergence guard's history (train/observe/divergence_guard.h, JSON text); "" = none. An
  // optional attribute, covered by meta_checksum when present.
  std::string guard_state;
};

// A dataset as stored: name, full shape, dtype ("float32") and stored checksum.
struct TensorInfo {
  std::string name;
  std::vector<int64_t> shape;
  std::string dtype;
  uint64_t checksum = 0;
  int64_t numel() const;
};

// A checkpoint that exists but cannot be trusted (not HDF5, truncated, checksum mismatch, read
// error). `resume = "auto"` skips such files with a warning; every other Error is fatal.
class CheckpointDamaged : public Error {
 public:
  using Error::Error;
};

// Writes `path` (created or truncated). Every rank of `comm` calls it with its own shards and the
// same meta (one rank, MPI not initialised or MPI_COMM_NULL: this process alone). Rank 0 creates
// the file with serial HDF5 — metadata and every dataset of the union of all ranks' tensors,
// allocated and reserved on disk — and each rank then writes its boxes with pwrite at the
// datasets' offsets and fdatasyncs them; each part's outcome is agreed by a plain MPI collective,
// so an I/O error on any rank is one AgreedError on all (checkpoint_comm.h). Checksums are summed
// over the shards (checkpoint_checksum.h).
void write_checkpoint_file(const std::string& path, const CheckpointMeta& meta,
                           std::span<const TensorShard> shards, MPI_Comm comm);

// An open checkpoint file (read-only, each process on its own; reads need no coordination).
class CheckpointReader {
 public:
  // Opens `path` and reads the metadata and tensor index. Throws CheckpointDamaged if the file is
  // not a readable HDF5 file, Error for an unknown format or version.
  explicit CheckpointReader(const std::string& path);
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  const std::string& path() const { return path_; }
  const CheckpointMeta& meta() const { return meta_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // sorted by name
  const TensorInfo* find(const std::string& name) const;
  uint64_t file_bytes() const;

  // Reads every shard's box. Errors name the file and the tensor: missing tensor or shape mismatch
  // (Error), read failure (CheckpointDamaged). Tensors whose shards in this call add up to the
  // whole tensor are verified against their stored checksum (CheckpointDamaged on mismatch).
  void read(std::span<const TensorShard> shards);

  struct Mismatch {
    std::string name;
    uint64_t stored = 0, computed = 0;
  };
  // Recomputes the checksum of every tensor, reading it in slabs of bounded size.
  std::vector<Mismatch> verify_all();

 private:
  std::string path_;
  int64_t file_id_ = -1;  // hid_t
  CheckpointMeta meta_;
  std::vector<TensorInfo> tensors_;
};

// "[768, 3072]"
std::string shape_string(std::span<const int64_t> shape);

}  // namespace baton
