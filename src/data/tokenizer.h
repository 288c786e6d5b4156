// Tokenizers: SentencePiece BPE (trained by `baton data build --train-tokenizer`, or an existing
// .model) and GPT-2's byte-level BPE (data/gpt2_bpe.h; OpenAI's encoder.json + vocab.bpe, which are
// Megatron-LM's GPT2BPETokenizer --vocab-file / --merge-file). Every document ends with the
// end-of-text id when written to a dataset. encode/decode are const and may run on several threads
// at once.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace baton {

struct DataConfig;

// Which tokenizer to load: `tokenizer` is a SentencePiece .model path, or "gpt2-bpe"
// (kGpt2BpeTokenizer, config/config.h), which reads `vocab_file` (encoder.json) and `merge_file`
// (vocab.bpe); those two are set for "gpt2-bpe" only.
struct TokenizerSpec {
  std::string tokenizer;
  std::string vocab_file;
  std::string merge_file;
};

class Tokenizer {
 public:
  // Loads the tokenizer `spec` names; throws baton::Error if a file is missing or unreadable, or
  // the spec is incomplete ("gpt2-bpe" without its two files) or contradictory (files without it).
  static std::unique_ptr<Tokenizer> load(const TokenizerSpec& spec);
  // Loads a SentencePiece .model file; throws baton::Error if missing or unreadable.
  static std::unique_ptr<Tokenizer> load(const std::string& model_path);
  // Trains a BPE model of `vocab_size` pieces on `input_files`; writes `<model_prefix>.model`
  // and `<model_prefix>.vocab`. Returns the .model path.
  static std::string train(const std::vector<std::string>& input_files,
                           const std::string& model_prefix, int vocab_size);
  virtual ~Tokenizer() = default;

  virtual int vocab_size() const = 0;
  virtual int eos_id() const = 0;  // appended after each document; -1 when there is none
  // Throws baton::Error on text it cannot encode (GPT-2 BPE: text that is not UTF-8).
  virtual std::vector<int32_t> encode(const std::string& text) const = 0;
  // Throws baton::Error on an id outside the vocabulary.
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  // The tokenizer in messages: the .model path, or "gpt2-bpe (VOCAB, MERGES)".
  std::string path() const { return path_; }

 protected:
  explicit Tokenizer(std::string path) : path_(std::move(path)) {}

 private:
  std::string path_;
};

// The tokenizer a config names: data.tokenizer (with data.vocab_file and data.merge_file for
// "gpt2-bpe").
std::unique_ptr<Tokenizer> load_tokenizer(const DataConfig& data);

}  // namespace baton
