// SentencePiece BPE tokenizer: training and encode/decode; Tokenizer::load picks it or GPT-2's BPE
// (data/gpt2_bpe.cpp) from a TokenizerSpec.
// Choices and why:
// - identity normalisation and no whitespace collapsing: decode(encode(text)) == text, newlines and
//   runs of spaces included, so a model trained on the dataset can reproduce layout;
// - byte fallback: any byte sequence encodes (characters never seen in training become <0xNN>
//   pieces) instead of mapping to <unk>;
// - ids: 0 = <unk>, 1 = </s> (end of text, appended after each document), no <s>, no padding;
// - training reads sentences through an iterator, so separator lines never become pieces and
//   long lines are cut into pieces SentencePiece accepts (it silently drops over-long sentences).
#include "data/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <unordered_map>

#include "config/config.h"
#include "core/error.h"
#include "data/gpt2_bpe.h"
#include "data/text_documents.h"

namespace baton {
namespace {

constexpr size_t kMaxSentenceBytes = 4096;
// Sentences sampled for training: plenty for a BPE vocabulary and bounds time and memory on big
// corpora (SentencePiece reservoir-samples when the input has more).
constexpr int kMaxTrainingSentences = 2'000'000;

// Training sentences: every non-blank, non-separator line of the inputs, cut at whitespace (or a
// UTF-8 character boundary) into pieces of at most kMaxSentenceBytes.
class LineIterator : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(const std::vector<std::string>& files) : files_(files) { Next(); }
  bool done() const override { return done_; }
  const std::string& value() const override { return value_; }
  sentencepiece::util::Status status() const override { return status_; }

  void Next() override {
    while (true) {
      if (!rest_.empty()) {
        value_ = take_chunk();
        if (!value_.empty()) return;
        continue;
      }
      if (!in_.is_open() || !std::getline(in_, line_)) {
        if (!open_next()) {
          done_ = true;
          return;
        }
        continue;
      }
      if (!line_.empty() && line_.back() == '\r') line_.pop_back();
      if (is_document_separator(line_)) continue;
      rest_ = line_;
    }
  }

 private:
  bool open_next() {
    if (in_.is_open()) in_.close();
    if (next_file_ >= files_.size()) return false;
    in_.clear();
    in_.open(files_[next_file_++], std::ios::binary);
    if (!in_)
      status_ = sentencepiece::util::Status(sentencepiece::util::StatusCode::kNotFound,
                                            "cannot read " + files_[next_file_ - 1]);
    return static_cast<bool>(in_);
  }

  // Removes and returns the next chunk of rest_, "" when rest_ holds only spaces.
  std::string take_chunk() {
    size_t start = rest_.find_first_not_of(" \t");
    if (start == std::string::npos) {
      rest_.clear();
      return {};
    }
    std::string_view s(rest_);
    s.remove_prefix(start);
    size_t cut = s.size();
    if (cut > kMaxSentenceBytes) {
      cut = s.rfind(' ', kMaxSentenceBytes);
      if (cut == std::string_view::npos || cut == 0) {
        cut = kMaxSentenceBytes;  // no space: cut before a UTF-8 continuation byte
        while (cut > 1 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
      }
    }
    std::string chunk(s.substr(0, cut));
    rest_ = std::string(s.substr(cut));
    return chunk;
  }

  const std::vector<std::string>& files_;
  size_t next_file_ = 0;
  std::ifstream in_;
  std::string line_, rest_, value_;
  bool done_ = false;
  sentencepiece::util::Status status_;
};

constexpr const char* kVocabHint =
    "use a smaller --train-tokenizer vocabulary, or more training text";

// SentencePiece reports "Internal: file(line) [check] message"; users need the vocabulary
// limits in their own terms.
Error training_error(const std::string& status, const std::string& model_prefix, int vocab_size) {
  const size_t bracket = status.find("] ");
  std::string msg = bracket == std::string::npos ? status : status.substr(bracket + 2);
  // A failed check with no message: its status (the check's expression) is the only reason there is.
  if (msg.find_first_not_of(" \t\n") == std::string::npos)
    msg = status.empty() ? "SentencePiece gave no reason" : status;
  if (size_t at = msg.find("<= "); msg.find("too high") != std::string::npos && at != msg.npos)
    return Error(fmt::format("the training text supports at most {} tokenizer pieces, not {}",
                             std::atoi(msg.c_str() + at + 3), vocab_size),
                 kVocabHint);
  if (size_t at = msg.find(" vs ");
      msg.find("required_chars") != std::string::npos && at != msg.npos)
    return Error(
        fmt::format("tokenizer vocabulary {} is too small: the 256 byte pieces, the special "
                    "pieces and the text's characters need {}",
                    vocab_size, std::atoi(msg.c_str() + at + 4)),
        "use a larger --train-tokenizer vocabulary (e.g. 8192)");
  return Error(fmt::format("training the tokenizer {}.model failed: {}", model_prefix, msg),
               "check the input files and the output directory");
}

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& model_path) : Tokenizer(model_path) {
    const auto status = sp_.Load(model_path);
    if (!status.ok())
      throw Error(fmt::format("cannot load tokenizer model {}: {}", model_path, status.ToString()),
                  "it must be a SentencePiece .model file; retrain it with `baton data build "
                  "--train-tokenizer VOCAB`");
  }

  int vocab_size() const override { return sp_.GetPieceSize(); }
  int eos_id() const override { return sp_.eos_id(); }

  std::vector<int32_t> encode(const std::string& text) const override {
    std::vector<int> ids;
    const auto status = sp_.Encode(text, &ids);
    if (!status.ok())
      throw Error(fmt::format("tokenizer {} cannot encode text: {}", path(), status.ToString()),
                  "check that the input is UTF-8 text");
    return std::vector<int32_t>(ids.begin(), ids.end());
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    const int n = vocab_size();
    for (int32_t id : ids)
      if (id < 0 || id >= n)
        throw Error(fmt::format("token id {} is outside tokenizer {} ({} tokens)", id, path(), n),
                    "the ids come from a different tokenizer or model");
    std::string text;
    const auto status = sp_.Decode(std::vector<int>(ids.begin(), ids.end()), &text);
    if (!status.ok())
      throw Error(fmt::format("tokenizer {} cannot decode: {}", path(), status.ToString()),
                  "the ids come from a different tokenizer or model");
    return text;
  }

 private:
  sentencepiece::SentencePieceProcessor sp_;
};

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string& model_path) {
  if (model_path == kGpt2BpeTokenizer)
    throw Error(fmt::format("tokenizer \"{}\" needs its vocabulary and merges files", kGpt2BpeTokenizer),
                "pass --vocab-file encoder.json --merge-file vocab.bpe (data.vocab_file / data.merge_file "
                "in a config); data/fetch-gpt2-bpe.sh DIR fetches them");
  if (!std::filesystem::is_regular_file(model_path))
    throw Error(fmt::format("tokenizer model {} not found", model_path),
                "check data.tokenizer / --tokenizer, or train one with `baton data build "
                "--train-tokenizer 8192 ...` (it writes PREFIX.model beside the dataset)");
  return std::make_unique<SentencePieceTokenizer>(model_path);
}

std::unique_ptr<Tokenizer> Tokenizer::load(const TokenizerSpec& spec) {
  const bool has_files = !spec.vocab_file.empty() || !spec.merge_file.empty();
  if (spec.tokenizer != kGpt2BpeTokenizer) {
    if (has_files)
      throw Error(fmt::format("a vocabulary / merges file is GPT-2 BPE's, but the tokenizer is '{}'",
                              spec.tokenizer),
                  fmt::format("use --tokenizer {0} (data.tokenizer = \"{0}\") with --vocab-file and "
                              "--merge-file, or drop them",
                              kGpt2BpeTokenizer));
    return load(spec.tokenizer);
  }
  if (spec.vocab_file.empty() || spec.merge_file.empty())
    return load(spec.tokenizer);  // the error naming both files
  return std::make_unique<Gpt2BpeTokenizer>(spec.vocab_file, spec.merge_file);
}

std::unique_ptr<Tokenizer> load_tokenizer(const DataConfig& data) {
  return Tokenizer::load(TokenizerSpec{data.tokenizer, data.vocab_file, data.merge_file});
}

std::string Tokenizer::train(const std::vector<std::string>& input_files,
                             const std::string& model_prefix, int vocab_size) {
  if (vocab_size < 2)
    throw Error(fmt::format("tokenizer vocabulary size {} is too small", vocab_size),
                "use e.g. --train-tokenizer 8192");
  for (const auto& f : input_files) require_input_file(f);
  const std::unordered_map<std::string, std::string> args = {
      {"model_prefix", model_prefix},
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(vocab_size)},
      {"character_coverage", "1.0"},
      {"byte_fallback", "true"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"split_digits", "true"},
      {"unk_id", "0"},
      {"eos_id", "1"},
      {"bos_id", "-1"},
      {"pad_id", "-1"},
      {"max_sentence_length", std::to_string(2 * kMaxSentenceBytes)},
      {"input_sentence_size", std::to_string(kMaxTrainingSentences)},
      {"shuffle_input_sentence", "true"},
      {"num_threads", "2"},
      {"minloglevel", "2"},  // SentencePiece's INFO/WARNING chatter is not useful to our users
  };
  LineIterator lines(input_files);
  // SentencePiece fails on no text with an empty message: say what is wrong instead.
  if (lines.done())
    throw Error(fmt::format("the input files ({}) hold no text to train a tokenizer on: only blank or "
                            "`<|endoftext|>` lines", fmt::join(input_files, ", ")),
                "pass text files with content to --input");
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, &lines);
  if (!status.ok()) throw training_error(status.ToString(), model_prefix, vocab_size);
  const std::string model_path = model_prefix + ".model";
  // BPE stops early when the text has no more pairs to merge; the model then has fewer pieces
  // than asked for, which would silently change the model's vocab_size.
  auto trained = load(model_path);
  if (trained->vocab_size() != vocab_size) {
    std::filesystem::remove(model_path);
    std::filesystem::remove(model_prefix + ".vocab");
    throw Error(fmt::format("the training text supports only {} tokenizer pieces, not {}",
                            trained->vocab_size(), vocab_size),
                kVocabHint);
  }
  return model_path;
}

}  // namespace baton
