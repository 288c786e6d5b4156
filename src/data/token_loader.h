// Training batches from an indexed dataset. The global batch of step s is a pure function of
// (seed, s): row r of step s is the window of seq_len+1 tokens starting at a position drawn by
// mix({seed, s, r}). Each data-parallel rank takes rows [rank*n, (rank+1)*n) of that batch, so any
// layout and any resumed run sees exactly the same data. Validation batches tile the validation
// set in order, the same way for every layout. All methods are const and keep no scratch state,
// so several threads may read batches from one loader at once.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/indexed_dataset.h"

namespace baton {

class TokenLoader {
 public:
  // Requires dataset.num_tokens() > seq_len + 1 (throws baton::Error otherwise). Keeps a reference:
  // the dataset must outlive the loader.
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
};

// Throws baton::Error when the dataset holds a token id >= vocab_size (it was built with another
// tokenizer, or model.vocab_size is too small). `tokenizer` names the vocabulary's source in the
// message (a .model path or "model.vocab_size"). Scans the dataset once (parallel, cached).
void check_tokenizer_matches(const IndexedDataset& dataset, int vocab_size,
                             const std::string& tokenizer = "the tokenizer");

}  // namespace baton
