// safetensors, Hugging Face's tensor file format (github.com/huggingface/safetensors): an 8-byte
// little-endian unsigned header length N, N bytes of UTF-8 JSON
//   {"__metadata__": {"format": "pt"}, "NAME": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}, ...}
// then the tensors' bytes (offsets relative to the end of the header; little-endian, C order).
// Used for the Hugging Face GPT-2 interop (train/checkpoint/hf_gpt2.h). The writer does what the
// reference implementation does: the header padded with spaces to a multiple of 8 bytes, the
// tensors laid out in name order (all F32: its dtype-alignment order is the name order), no gaps.
// The reader treats the file as untrusted: every length and offset is checked before it is used.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace baton::safetensors {

struct Entry {
  std::string name;
  std::string dtype;            // "F32", "F16", "BF16", ... as stored
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range in the data section
  int64_t numel() const;
};

class Reader {
 public:
  // Opens `path` and parses its header; throws Error naming the file when it is not a valid
  // safetensors file (header length, JSON, dtypes, shapes against byte ranges, ranges in the file).
  explicit Reader(const std::string& path);
  ~Reader();
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<Entry>& tensors() const { return entries_; }  // sorted by name
  const Entry* find(const std::string& name) const;                // null when absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The tensor as fp32 (F32 as is; F16, BF16 and F64 converted). Throws Error for another dtype.
  std::vector<float> read_f32(const Entry& e) const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t data_start_ = 0;
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
  void parse();  // the header, checked against the file
};

// One F32 tensor to write: `fill` writes its numel(shape) floats (C order) into the buffer given.
struct WriteTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::function<void(float* dst)> fill;
};

// Writes `tensors` (one at a time: only the largest is held in memory) and `metadata` to `path`,
// through `path`.tmp and a rename. Returns the file's size in bytes. Throws Error on I/O failure.
uint64_t write_f32(const std::string& path, std::vector<WriteTensor> tensors,
                   const std::map<std::string, std::string>& metadata);

}  // namespace baton::safetensors
