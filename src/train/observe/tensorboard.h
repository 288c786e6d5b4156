// TensorBoard event files (run.tensorboard): the rank that writes a metrics file writes the same
// records as scalars to an `events.out.tfevents.*` file beside it, so that TensorBoard shows exactly
// what metrics.jsonl holds. A file is TFRecord framing (per record: uint64 length, the masked CRC32C
// of those 8 bytes, the bytes, their masked CRC32C; little-endian) around TensorFlow's Event protos
// (tensorboard.proto, through libprotobuf): first a file_version "brain.Event:2" event, then a
// SessionLog START at the first step the run logs, then one Event per logged step. The tags are
// docs/configuration.md's "TensorBoard" list (tensorboard_scalars below).
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "train/observe/metrics.h"

namespace baton {

// CRC32C (Castagnoli, reflected polynomial 0x82F63B78) of `n` bytes, continuing from `crc` (0 to start).
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
// TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t n);
// One TFRecord: the framing around `payload`.
std::string tfrecord(const std::string& payload);

// The scalars of one metrics record, (tag, value), in the order written: every number the JSON
// record has, under "<section>/<key>" — train/ (loss, lr, grad_norm, rewinds, batches_skipped),
// val/ (val_<name> -> val/<name>), perf/ (step_ms, tokens_per_s or an image model's images_per_s,
// tflops_per_gpu, mfu, comm_share), vw/ (a virtual worker's clock, c_global, staleness, wait_s, ...).
// Optional fields are written when the JSON has them (mfu with a known peak, comm_share with
// several ranks, val_* on evaluation steps).
std::vector<std::pair<std::string, double>> tensorboard_scalars(const StepMetrics& m);

// `<dir>/events.out.tfevents.<unix seconds>.<host>.<pid>`: a new file per process (a resumed run
// adds one; TensorBoard reads every events file of a directory, in name order), its seconds past
// those of every events file already in `dir`.
std::string tensorboard_file_path(const std::string& dir);

class TensorBoardWriter {
 public:
  // Creates `path` (and its directory) and writes the file_version event and a SessionLog START at
  // `first_step` (the first step this run logs: a resumed run's START makes TensorBoard drop the
  // points at and after it that an earlier run logged past its last checkpoint).
  // Throws Error when the file cannot be created or written.
  TensorBoardWriter(const std::string& path, int64_t first_step);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;
  // One Event at m.step holding tensorboard_scalars(m); flushed. Throws Error on a failed write.
  void write(const StepMetrics& m);
  // A rewind (train.on_spike = "rewind") to a checkpoint: the run logs again from `first_step`.
  void restart(int64_t first_step);
  const std::string& path() const { return path_; }

 private:
  void append(const std::string& event_bytes);
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace baton
