// Training batches from an indexed dataset. The global batch of step s is a pure function of
// (seed, s): row r of step s is the window of seq_len+1 tokens starting at a position drawn by
// mix({seed, s, r}). Each data-parallel rank takes rows [rank*n, (rank+1)*n) of that batch, so any
// layout and any resumed run sees exactly the same data. Validation batches tile the validation
// set in order, the same way for every layout.
#pragma once
#include <cstdint>
#include <vector>

#include "data/indexed_dataset.h"

namespace baton {

class TokenLoader {
 public:
  // Requires dataset.num_tokens() > seq_len + 1 (throws baton::Error otherwise).
  TokenLoader(const IndexedDataset& dataset, int seq_len, uint64_t seed);

  int seq_len() const { return seq_len_; }
  // Writes rows [row_begin, row_begin+rows) of the training batch of `step`:
  // inputs[rows, seq_len] and targets[rows, seq_len] (targets = inputs shifted by one).
  void train_rows(int64_t step, int row_begin, int rows, int32_t* inputs, int32_t* targets) const;
  // Validation batch `index` (0-based) of `batch_rows` rows: rows [row_begin, row_begin+rows).
  // Windows are consecutive non-overlapping seq_len spans from the start, wrapping at the end.
  void eval_rows(int64_t index, int batch_rows, int row_begin, int rows, int32_t* inputs,
                 int32_t* targets) const;
  // Number of distinct validation windows (num_tokens - 1) / seq_len.
  int64_t eval_windows() const;

 private:
  void window(int64_t start, int32_t* inputs, int32_t* targets) const;
  const IndexedDataset& data_;
  int seq_len_;
  uint64_t seed_;
  mutable std::vector<int32_t> scratch_;
};

}  // namespace baton
