// Megatron-LM's indexed dataset (`PREFIX.bin` + `PREFIX.idx`, "MMIDIDX" header), so datasets built
// by baton work in Megatron-LM and the other way round. Tokens are uint16 when the vocabulary fits,
// else int32. The reader memory-maps both files and validates every size and offset on open.
//
// .idx layout (little endian): magic "MMIDIDX\0\0" (9 bytes), u64 version = 1, u8 dtype code
// (1 u8, 2 i8, 3 i16, 4 i32, 5 i64, 6 f64, 7 f32, 8 u16), u64 sequence count S, u64 document-index
// count D+1, i32 sizes[S] (tokens per sequence), i64 pointers[S] (byte offsets into .bin),
// i64 document_index[D+1]. One sequence per document here. The reader requires what Megatron's
// builder writes: sequences back to back from byte 0 of the .bin, so the dataset is also one token
// stream (read_tokens) that the loaders sample windows from.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace baton {

enum class TokenDType : uint8_t { U16 = 8, I32 = 4 };

// Smallest token type that holds ids < vocab_size.
TokenDType token_dtype_for_vocab(int64_t vocab_size);

class IndexedDatasetWriter {
 public:
  IndexedDatasetWriter(const std::string& prefix, TokenDType dtype);
  ~IndexedDatasetWriter();
  void add_document(std::span<const int32_t> tokens);  // one sequence + one document
  // Writes PREFIX.idx and closes PREFIX.bin. Both are written to temporary names and renamed, so a
  // failed build never leaves a half-written dataset under the final name.
  void finalize();
  int64_t tokens_written() const { return tokens_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int64_t tokens_ = 0;
};

class IndexedDataset {
 public:
  // Opens and validates PREFIX.idx / PREFIX.bin. Throws baton::Error naming the file on any
  // truncation, bad magic, unsupported version or dtype, or offsets that do not fit the .bin.
  static std::unique_ptr<IndexedDataset> open(const std::string& prefix);
  ~IndexedDataset();

  const std::string& prefix() const { return prefix_; }
  TokenDType dtype() const { return dtype_; }
  int64_t num_sequences() const { return static_cast<int64_t>(sizes_.size()); }
  int64_t num_tokens() const { return num_tokens_; }
  int64_t sequence_length(int64_t i) const { return sizes_[i]; }
  // Tokens of sequence i.
  std::vector<int32_t> sequence(int64_t i) const;
  // Copies tokens [pos, pos+count) of the concatenation of all sequences into out.
  void read_tokens(int64_t pos, int64_t count, int32_t* out) const;
  // Largest token id present, -1 when empty (computed lazily with a parallel scan; thread-safe).
  int32_t max_token_id() const;

 private:
  IndexedDataset() = default;
  std::string prefix_;
  TokenDType dtype_ = TokenDType::U16;
  std::vector<int32_t> sizes_;
  std::vector<int64_t> token_offsets_;  // token position of each sequence in the concatenation
  int64_t num_tokens_ = 0;
  const uint8_t* bin_ = nullptr;
  size_t bin_bytes_ = 0;
  static constexpr int32_t kMaxUnknown = INT32_MIN;  // max_token_ not computed yet
  mutable std::atomic<int32_t> max_token_{kMaxUnknown};
};

}  // namespace baton
