// SentencePiece tokenizer (BPE): training a new one from text files, and encode/decode with a
// trained one. Every document ends with the end-of-text id when written to a dataset.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace baton {

class Tokenizer {
 public:
  // Loads a SentencePiece .model file; throws baton::Error if missing or unreadable.
  static std::unique_ptr<Tokenizer> load(const std::string& model_path);
  // Trains a BPE model of `vocab_size` pieces on `input_files`; writes `<model_prefix>.model`
  // and `<model_prefix>.vocab`. Returns the .model path.
  static std::string train(const std::vector<std::string>& input_files,
                           const std::string& model_prefix, int vocab_size);
  ~Tokenizer();

  int vocab_size() const;
  int eos_id() const;  // appended after each document
  std::vector<int32_t> encode(const std::string& text) const;
  std::string decode(const std::vector<int32_t>& ids) const;
  std::string path() const { return path_; }

 private:
  Tokenizer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string path_;
};

}  // namespace baton
