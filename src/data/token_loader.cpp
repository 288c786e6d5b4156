// Training and validation windows over an indexed dataset's token stream (see token_loader.h).
// Everything is a pure function of (seed, step, row) or (index, row), computed without state, so
// data-parallel ranks, resumed runs and concurrent callers all agree on every batch.
#include "data/token_loader.h"

#include "core/error.h"
#include "core/rng.h"

namespace baton {

TokenLoader::TokenLoader(const IndexedDataset& dataset, int seq_len, uint64_t seed)
    : data_(dataset), seq_len_(seq_len), seed_(seed) {
  if (seq_len <= 0)
    throw Error(fmt::format("sequence length {} must be positive", seq_len),
                "set model.seq_len to e.g. 256");
  if (dataset.num_tokens() <= static_cast<int64_t>(seq_len) + 1)
    throw Error(fmt::format("dataset {} has {} tokens, too few for one window of seq_len {} + 1",
                            dataset.prefix(), dataset.num_tokens(), seq_len),
                "use a larger dataset or a smaller model.seq_len");
}

void TokenLoader::window(int64_t start, int32_t* inputs, int32_t* targets) const {
  // Two short reads instead of a shared scratch buffer keep the loader free of mutable state.
  data_.read_tokens(start, seq_len_, inputs);
  data_.read_tokens(start + 1, seq_len_, targets);
}

void TokenLoader::train_rows(int64_t step, int row_begin, int rows, int32_t* inputs,
                             int32_t* targets) const {
  BATON_ASSERT(step >= 0 && row_begin >= 0 && rows >= 0, "bad batch request step {} rows [{}, +{})",
               step, row_begin, rows);
  // Every start with start + seq_len + 1 <= num_tokens is possible: num_tokens - seq_len of them.
  const uint64_t starts = static_cast<uint64_t>(data_.num_tokens() - seq_len_);
  for (int i = 0; i < rows; ++i) {
    const uint64_t row = static_cast<uint64_t>(row_begin + i);
    const int64_t start =
        static_cast<int64_t>(mix({seed_, static_cast<uint64_t>(step), row}) % starts);
    window(start, inputs + static_cast<int64_t>(i) * seq_len_,
           targets + static_cast<int64_t>(i) * seq_len_);
  }
}

int64_t TokenLoader::eval_windows() const { return (data_.num_tokens() - 1) / seq_len_; }

void TokenLoader::eval_rows(int64_t index, int batch_rows, int row_begin, int rows, int32_t* inputs,
                            int32_t* targets) const {
  BATON_ASSERT(
      index >= 0 && batch_rows > 0 && row_begin >= 0 && rows >= 0 && row_begin + rows <= batch_rows,
      "bad eval request batch {} of {} rows, rows [{}, +{})", index, batch_rows, row_begin, rows);
  const int64_t windows = eval_windows();
  for (int i = 0; i < rows; ++i) {
    const int64_t w = (index * batch_rows + row_begin + i) % windows;
    window(w * seq_len_, inputs + static_cast<int64_t>(i) * seq_len_,
           targets + static_cast<int64_t>(i) * seq_len_);
  }
}

void check_tokenizer_matches(const IndexedDataset& dataset, int vocab_size,
                             const std::string& tokenizer) {
  const int32_t max_id = dataset.max_token_id();
  if (max_id >= vocab_size)
    throw Error(fmt::format("dataset {} has token id {} but {} has only {} tokens",
                            dataset.prefix(), max_id, tokenizer, vocab_size),
                "use the tokenizer the dataset was built with (PREFIX.model beside it), or "
                "rebuild the dataset with `baton data build --tokenizer MODEL`");
}

}  // namespace baton
