// Where a run's samples come from: the global batch of every step (and the validation batches) as
// pure functions of their indices, so every rank that asks for a row — data-parallel slices, the
// first and the last pipeline stage, tensor-parallel peers, a resumed run — gets the same data.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "model/micro_batch.h"

namespace baton {

// Fills `out` with samples [row, row + n) of batch `batch` (inputs, targets and shape).
using BatchFn = std::function<void(int64_t batch, int row, int n, HostBatch& out)>;

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Samples [row, row + n) of the global batch of `step`.
  virtual void train_rows(int64_t step, int row, int n, HostBatch& out) const = 0;
  virtual bool has_valid() const { return false; }
  // Samples [row, row + n) of validation batch `batch`, batches of `rows` samples.
  virtual void valid_rows(int batch, int rows, int row, int n, HostBatch& out) const;
  // Distinct validation samples (images, or a GPT's sequence windows) before the batches wrap.
  virtual int64_t valid_samples() const { return 0; }
  // The header's `data:` line before " | N samples/step ...".
  virtual std::string describe() const = 0;
  // The header's `baseline:` line (without the prefix); empty: none.
  virtual std::string baseline() const { return {}; }
};

}  // namespace baton
