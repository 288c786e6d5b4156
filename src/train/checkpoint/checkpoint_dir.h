// A checkpoint directory: complete checkpoints `step-NNNNNNN.h5`, at most one `step-NNNNNNN.h5.tmp`
// being written, and `latest`, a one-line text file naming the newest complete checkpoint.
//
// Save protocol (why each step: a crash or kill -9 at any point leaves the previous checkpoint
// complete and findable):
//   1. rank 0 lays out step-N.h5.tmp and reserves its bytes; every rank writes and fdatasyncs its
//      part; all agree that every part is written before anything is published
//   2. rank 0: fsync(tmp), rename(tmp, step-N.h5), fsync(dir)  -- the name appears only when whole
//   3. rank 0: write latest.tmp, fsync, rename to latest, fsync(dir)
//   4. rank 0: delete stale *.h5.tmp and all but the newest `keep` checkpoints (the new one is
//      already complete, so pruning can never leave fewer complete checkpoints than before), never
//      one named in `pinned` (the last good checkpoint before a loss spike)
//   5. all agree on how 2-4 went (an error on rank 0 is every rank's)
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "train/checkpoint/checkpoint.h"

namespace baton {

std::string checkpoint_file_name(int64_t step);  // "step-0000200.h5"
// The directory of virtual worker `vw`'s own files inside a checkpoint directory: "<dir>/vw<k>"
// (train/hetero/wsp_checkpoint.h).
std::string vw_checkpoint_dir(const std::string& checkpoint_dir, int vw);

// Writes `text` to dir/name so that the name appears only with the whole text on disk (a .tmp
// file, fsync, rename, fsync of the directory). Throws Error.
void write_durably(const std::string& dir, const std::string& name, const std::string& text);

struct CheckpointEntry {
  int64_t step = 0;
  std::string path;
};
// Complete checkpoints in `dir` (names step-<digits>.h5; never .tmp), ascending by step; empty if
// the directory does not exist.
std::vector<CheckpointEntry> list_checkpoints(const std::string& dir);

// The path `dir/latest` names, if the pointer exists and the file it names exists.
std::optional<std::string> read_latest(const std::string& dir);

// Candidates for "the newest complete checkpoint", best first: the step files newest first. The
// `latest` pointer normally names the first; when a crash fell between the rename (3) and the
// pointer update (4), the newer file is complete and comes first. A `latest` naming a file outside
// the step-N pattern comes first.
std::vector<std::string> checkpoint_candidates(const std::string& dir);

// A checkpoint file, or a directory (its newest complete checkpoint). Throws Error if none.
std::string resolve_checkpoint(const std::string& path_or_dir);

struct SaveResult {
  std::string path;
  uint64_t bytes = 0;
  double seconds = 0;        // wall time of the whole protocol, the time training is blocked
  double write_seconds = 0;  // of which: checksums, the layout, every rank's data and its fdatasync
  double sync_seconds = 0;   // of which: rank 0's fsync of the file, rename, fsync of the directory
};
// Runs the protocol above. All ranks of `comm` call it (MPI_COMM_NULL: this process alone). On
// failure the .tmp file is removed and nothing else in the directory has changed.
SaveResult save_checkpoint(const std::string& dir, const CheckpointMeta& meta,
                           std::span<const TensorShard> shards, int keep, MPI_Comm comm);

// After a loss spike flagged at step `spike_step` (1-based): the checkpoints of steps >=
// spike_step - 1 hold the weights that produced that loss (or later ones) and are renamed to
// NAME.spike — kept for inspection, never resumed from, never pruned; the newest checkpoint before
// them becomes `latest` and is pinned (checkpoint.keep's rotation never removes it). Returns its
// path, or "" when there is none. Rank 0 only; throws Error.
std::string set_aside_after_spike(const std::string& dir, int64_t spike_step);

}  // namespace baton
