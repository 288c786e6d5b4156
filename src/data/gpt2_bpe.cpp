// GPT-2 byte-level BPE (see gpt2_bpe.h for the algorithm and its reference).
// Choices and why:
// - \s in the pre-tokenizer is ECMAScript's (TAB, LF, VT, FF, CR, U+FEFF, the Zs space separators,
//   U+2028, U+2029): gpt-3-encoder's JavaScript regex, the reference, uses it. PCRE2's own \s (UCP)
//   would differ in three characters: U+0085 (NEL) and U+180E are \s there, U+FEFF is not. Python's
//   `regex` (OpenAI's encoder.py, Megatron's GPT2BPETokenizer) differs in two: U+0085 is \s there,
//   U+FEFF is not; text with those beside spaces or punctuation can get other ids there;
// - Zs, \p{L} and \p{N} come from PCRE2's Unicode tables (10.42: Unicode 14), so characters assigned
//   after that version are "other" here, possibly letters or digits for a newer JavaScript engine;
// - ranks are keyed by the pair of token ids (encoder.py's tuples). gpt-3-encoder keys them by the
//   string "A,B", which collides for 11 of GPT-2's merges whose parts hold commas; a search of the
//   513,240 strings of up to 6 characters over `",]['.}) a` containing a comma found no text where
//   that changes the ids;
// - the per-thread word cache is bounded (cleared when full) and keyed by the tokenizer instance,
//   so `baton data build`'s OpenMP threads share nothing and never lock.
#include "data/gpt2_bpe.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <fmt/format.h>
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "config/config.h"
#include "core/error.h"

namespace baton {
namespace {

constexpr const char* kFetchHint = "data/fetch-gpt2-bpe.sh DIR fetches GPT-2's encoder.json and vocab.bpe";
constexpr std::string_view kEndOfText = "<|endoftext|>";

// ECMAScript's \s: WhiteSpace (TAB, VT, FF, ZWNBSP, any Zs) and LineTerminator (LF, CR, LS, PS).
constexpr std::string_view kJsSpace = R"(\t\n\x{0B}\f\r\x{FEFF}\p{Zs}\x{2028}\x{2029})";

// Words cached per thread (each a few dozen bytes of ids): bounds memory on huge corpora.
constexpr size_t kMaxCachedWords = size_t(1) << 17;
// Longer pieces (runs of spaces, long numbers, URLs) are rare: not worth a cache entry.
constexpr size_t kMaxCachedBytes = 64;

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes stand for themselves, the other 68 bytes for
// U+0100.. in byte order, so every byte has a visible character and merges never hold spaces.
std::array<char32_t, 256> byte_to_unicode() {
  std::array<char32_t, 256> cs{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    cs[b] = printable ? char32_t(b) : next++;
  }
  return cs;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += char(c);
  } else if (c < 0x800) {
    out += char(0xC0 | (c >> 6));
    out += char(0x80 | (c & 0x3F));
  } else {  // the byte alphabet ends at U+0143
    out += char(0xE0 | (c >> 12));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  }
}

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenIds = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

struct WordCache {
  uint64_t owner = 0;  // Impl::instance the entries belong to
  std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> words;
  std::vector<int32_t> word;  // BPE scratch
};

std::atomic<uint64_t> next_instance{1};

}  // namespace

struct Gpt2BpeTokenizer::Impl {
  pcre2_code* re = nullptr;
  std::vector<std::string> token_bytes;  // id -> the bytes it stands for
  std::array<int32_t, 256> byte_id{};    // byte -> its one-byte token
  struct Merge {
    int32_t rank;
    int32_t id;  // the merged token
  };
  std::unordered_map<uint64_t, Merge> merges;  // (left id, right id) -> merge
  int32_t eos = -1;
  uint64_t instance = next_instance++;
  std::string vocab_file;

  ~Impl() { pcre2_code_free(re); }

  void compile();
  void read_vocab(const std::string& path, TokenIds& ids);
  void read_merges(const std::string& path, const TokenIds& ids);
  // Calls piece(std::string_view) for each pre-token of `text`, in order.
  template <class F>
  void for_each_piece(std::string_view text, F&& piece) const;
  // Appends the BPE ids of one piece.
  void bpe(std::string_view piece, std::vector<int32_t>& out) const;
};

std::string Gpt2BpeTokenizer::pattern() {
  const std::string s(kJsSpace);
  return "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" + s + "\\p{L}\\p{N}]+|[" + s + "]+(?![^" + s +
         "])|[" + s + "]+";
}

void Gpt2BpeTokenizer::Impl::compile() {
  const std::string pat = pattern();
  int err = 0;
  PCRE2_SIZE at = 0;
  re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat.data()), pat.size(), PCRE2_UTF | PCRE2_UCP, &err, &at,
                     nullptr);
  if (!re) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    BATON_ASSERT(false, "GPT-2 pre-tokenizer regex does not compile at {}: {}", at, reinterpret_cast<char*>(msg));
  }
  pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);  // where JIT is unavailable pcre2_match interprets
}

void Gpt2BpeTokenizer::Impl::read_vocab(const std::string& path, TokenIds& ids) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error(fmt::format("GPT-2 vocabulary file {} {}", path,
                            std::filesystem::exists(path) ? "cannot be read" : "not found"),
                fmt::format("check --vocab-file / data.vocab_file; {}", kFetchHint));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("GPT-2 vocabulary file {} is not JSON: {}", path, e.what()),
                fmt::format("--vocab-file is GPT-2's encoder.json (Megatron's vocab.json); {}", kFetchHint));
  }
  if (!j.is_object() || j.empty())
    throw Error(fmt::format("GPT-2 vocabulary file {} is not a JSON object of tokens and ids", path),
                fmt::format("--vocab-file is GPT-2's encoder.json (Megatron's vocab.json); {}", kFetchHint));
  std::array<int, 0x144> byte_of;  // U+0000..U+0143 -> byte, -1 outside the alphabet
  byte_of.fill(-1);
  const auto cs = byte_to_unicode();
  for (int b = 0; b < 256; ++b) byte_of[cs[b]] = b;

  const size_t n = j.size();
  token_bytes.assign(n, {});
  std::vector<bool> seen(n, false);
  for (const auto& [token, value] : j.items()) {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() >= int64_t(n) ||
        seen[value.get<size_t>()])
      throw Error(fmt::format("GPT-2 vocabulary file {}: token {} has id {}, but the {} ids must be 0..{}, "
                              "each once",
                              path, nlohmann::json(token).dump(), value.dump(), n, n - 1),
                  "the file is damaged or not a GPT-2 BPE vocabulary");
    const auto id = value.get<int32_t>();
    seen[size_t(id)] = true;
    ids.emplace(token, id);
    // The token's characters, each one byte of the alphabet.
    std::string& bytes = token_bytes[size_t(id)];
    for (size_t i = 0; i < token.size();) {
      const auto c = static_cast<unsigned char>(token[i]);
      const size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
      char32_t cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
      for (size_t k = 1; k < len && i + k < token.size(); ++k) cp = (cp << 6) | (token[i + k] & 0x3F);
      if (cp >= byte_of.size() || byte_of[cp] < 0)
        throw Error(fmt::format("GPT-2 vocabulary file {}: token {} holds U+{:04X}, which is not in GPT-2's "
                                "byte alphabet",
                                path, nlohmann::json(token).dump(), uint32_t(cp)),
                    "a byte-level BPE vocabulary (GPT-2's encoder.json) is needed, not another tokenizer's");
      bytes += char(byte_of[cp]);
      i += len;
    }
  }
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    append_utf8(ch, cs[b]);
    const auto it = ids.find(ch);
    if (it == ids.end())
      throw Error(fmt::format("GPT-2 vocabulary file {} has no token for byte 0x{:02x} ({})", path, b,
                              nlohmann::json(ch).dump()),
                  "a byte-level BPE vocabulary holds all 256 byte tokens; the file is damaged or not GPT-2's");
    byte_id[b] = it->second;
  }
  if (const auto it = ids.find(kEndOfText); it != ids.end()) eos = it->second;
}

void Gpt2BpeTokenizer::Impl::read_merges(const std::string& path, const TokenIds& ids) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error(fmt::format("GPT-2 merges file {} {}", path,
                            std::filesystem::exists(path) ? "cannot be read" : "not found"),
                fmt::format("check --merge-file / data.merge_file; {}", kFetchHint));
  const std::string hint = fmt::format("--merge-file is GPT-2's vocab.bpe (Megatron's merges.txt) and must "
                                       "belong to the --vocab-file; {}",
                                       kFetchHint);
  std::string line;
  int64_t line_no = 0;
  int32_t rank = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line_no == 1 && line.starts_with("#version")) continue;
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    const std::string_view left = std::string_view(line).substr(0, space);
    const std::string_view right =
        space == std::string::npos ? std::string_view() : std::string_view(line).substr(space + 1);
    if (left.empty() || right.empty() || right.find(' ') != std::string_view::npos)
      throw Error(fmt::format("GPT-2 merges file {}:{}: '{}' is not a merge (two tokens separated by a space)",
                              path, line_no, line),
                  hint);
    const std::string merged = std::string(left) + std::string(right);
    int32_t part[3];
    const std::string_view names[3] = {left, right, merged};
    for (int k = 0; k < 3; ++k) {
      const auto it = ids.find(names[k]);
      if (it == ids.end())
        throw Error(fmt::format("GPT-2 merges file {}:{}: {} '{}' is not in the vocabulary {}", path, line_no,
                                k == 2 ? "the merged token" : "token", names[k], vocab_file),
                    hint);
      part[k] = it->second;
    }
    merges.insert_or_assign(pair_key(part[0], part[1]), Merge{rank++, part[2]});  // a repeat: the last wins
  }
  if (in.bad()) throw Error(fmt::format("error while reading {}", path), "check the file and the disk");
  if (merges.empty())
    throw Error(fmt::format("GPT-2 merges file {} holds no merges", path), hint);
}

template <class F>
void Gpt2BpeTokenizer::Impl::for_each_piece(std::string_view text, F&& piece) const {
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create_from_pattern(re, nullptr), &pcre2_match_data_free);
  BATON_ASSERT(md, "out of memory for PCRE2 match data");
  const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  uint32_t options = 0;  // the first match checks the whole text is UTF-8; later ones skip it
  for (size_t at = 0; at < text.size();) {
    const int rc = pcre2_match(re, subject, text.size(), at, options, md.get(), nullptr);
    if (rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21) {
      const size_t bad = pcre2_get_startchar(md.get());
      throw Error(fmt::format("text is not UTF-8: byte {} (0x{:02x}) starts no valid character", bad,
                              static_cast<unsigned char>(text[std::min(bad, text.size() - 1)])),
                  "GPT-2 BPE encodes UTF-8 text: convert the input first (e.g. iconv -f latin1 -t utf-8)");
    }
    // Every character is \s, a letter, a number or none of these: some alternative matches it.
    BATON_ASSERT(rc > 0, "GPT-2 pre-tokenizer: PCRE2 error {} at byte {}", rc, at);
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    BATON_ASSERT(ov[0] == at && ov[1] > at, "GPT-2 pre-tokenizer skipped text at byte {}", at);
    piece(text.substr(at, ov[1] - at));
    at = ov[1];
    options = PCRE2_NO_UTF_CHECK;
  }
}

void Gpt2BpeTokenizer::Impl::bpe(std::string_view piece, std::vector<int32_t>& out) const {
  thread_local WordCache cache;
  if (cache.owner != instance) {
    cache.words.clear();
    cache.owner = instance;
  }
  const bool cacheable = piece.size() <= kMaxCachedBytes;
  if (cacheable)
    if (const auto it = cache.words.find(piece); it != cache.words.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  std::vector<int32_t>& w = cache.word;
  w.clear();
  for (const char c : piece) w.push_back(byte_id[static_cast<unsigned char>(c)]);
  while (w.size() > 1) {
    // The adjacent pair of lowest rank ...
    int32_t best = INT32_MAX, first = -1, second = -1, merged = -1;
    for (size_t i = 0; i + 1 < w.size(); ++i)
      if (const auto it = merges.find(pair_key(w[i], w[i + 1])); it != merges.end() && it->second.rank < best) {
        best = it->second.rank;
        first = w[i];
        second = w[i + 1];
        merged = it->second.id;
      }
    if (merged < 0) break;
    // ... merged wherever it occurs, left to right, without overlaps (encoder.py's inner loop).
    size_t o = 0;
    for (size_t i = 0; i < w.size();) {
      if (i + 1 < w.size() && w[i] == first && w[i + 1] == second) {
        w[o++] = merged;
        i += 2;
      } else {
        w[o++] = w[i++];
      }
    }
    w.resize(o);
  }
  out.insert(out.end(), w.begin(), w.end());
  if (cacheable) {
    if (cache.words.size() >= kMaxCachedWords) cache.words.clear();
    cache.words.emplace(std::string(piece), w);
  }
}

Gpt2BpeTokenizer::Gpt2BpeTokenizer(const std::string& vocab_file, const std::string& merge_file)
    : Tokenizer(fmt::format("{} ({}, {})", kGpt2BpeTokenizer, vocab_file, merge_file)),
      impl_(std::make_unique<Impl>()) {
  impl_->vocab_file = vocab_file;
  TokenIds ids;
  impl_->read_vocab(vocab_file, ids);
  impl_->read_merges(merge_file, ids);
  impl_->compile();
}

Gpt2BpeTokenizer::~Gpt2BpeTokenizer() = default;

int Gpt2BpeTokenizer::vocab_size() const { return static_cast<int>(impl_->token_bytes.size()); }

int Gpt2BpeTokenizer::eos_id() const { return impl_->eos; }

std::vector<int32_t> Gpt2BpeTokenizer::encode(const std::string& text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3);
  impl_->for_each_piece(text, [&](std::string_view piece) { impl_->bpe(piece, ids); });
  return ids;
}

std::vector<std::string> Gpt2BpeTokenizer::pre_tokenize(std::string_view text) const {
  std::vector<std::string> pieces;
  impl_->for_each_piece(text, [&](std::string_view piece) { pieces.emplace_back(piece); });
  return pieces;
}

std::string Gpt2BpeTokenizer::decode(const std::vector<int32_t>& ids) const {
  const int n = vocab_size();
  std::string text;
  for (const int32_t id : ids) {
    if (id < 0 || id >= n)
      throw Error(fmt::format("token id {} is outside tokenizer {} ({} tokens)", id, path(), n),
                  "the ids come from a different tokenizer or model");
    text += impl_->token_bytes[size_t(id)];
  }
  return text;
}

}  // namespace baton
