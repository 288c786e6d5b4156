// GPT-2 byte-level BPE (src/data/gpt2_bpe.h) on a small hand-made vocabulary in GPT-2's file format
// (the 256 byte tokens in byte order, a few merges, <|endoftext|>): the byte alphabet decodes to
// every byte, merges apply by rank and left to right, the pre-tokenizer splits as gpt-3-encoder's
// regex does (ECMAScript's \s), decode(encode(x)) == x, text that is not UTF-8 and malformed files
// are errors, threads encode alike; and the config keys data.vocab_file / data.merge_file. The real
// GPT-2 files against the JavaScript reference: tests/e2e/test_gpt2_bpe.sh.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/error.h"
#include "data/gpt2_bpe.h"
#include "data/tokenizer.h"

namespace baton {
namespace {

namespace fs = std::filesystem;

// GPT-2's bytes_to_unicode() character of byte b, as UTF-8.
std::string byte_char(int b) {
  const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  int cp = b;
  if (!printable) {
    cp = 256;
    for (int k = 0; k < b; ++k)
      if (!((k >= '!' && k <= '~') || (k >= 0xA1 && k <= 0xAC) || (k >= 0xAE && k <= 0xFF))) ++cp;
  }
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// Merges in rank order; tokens are written in the byte alphabet ("Ġ" = space).
const std::vector<std::pair<std::string, std::string>> kMerges = {
    {"a", "a"}, {"aa", "aa"}, {"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}, {"Ġ", "Ġ"}, {"t", "h"},
};
constexpr int kAa = 256, kAaaa = 257, kSpaceT = 258, kHe = 259, kSpaceThe = 260, kTwoSpaces = 261, kTh = 262;
constexpr int kEot = 263;

class Gpt2BpeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("baton-test-gpt2-bpe-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::string json = "{";
    for (int b = 0; b < 256; ++b) json += json_string(byte_char(b)) + ": " + std::to_string(b) + ", ";
    int id = 256;
    for (const auto& [l, r] : kMerges) json += json_string(l + r) + ": " + std::to_string(id++) + ", ";
    json += "\"<|endoftext|>\": " + std::to_string(id) + "}";
    write("vocab.json", json);
    std::string merges = "#version: 0.2\n";
    for (const auto& [l, r] : kMerges) merges += l + " " + r + "\n";
    write("merges.txt", merges);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static std::string write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
    return (dir_ / name).string();
  }
  static std::string vocab() { return (dir_ / "vocab.json").string(); }
  static std::string merges() { return (dir_ / "merges.txt").string(); }
  static Gpt2BpeTokenizer tokenizer() { return Gpt2BpeTokenizer(vocab(), merges()); }

  static inline fs::path dir_;
};

template <typename Fn>
void expect_error(Fn&& fn, const std::string& part) {
  try {
    fn();
    FAIL() << "expected baton::Error containing '" << part << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    EXPECT_FALSE(e.hint().empty()) << "no hint for: " << e.what();
  }
}

TEST_F(Gpt2BpeTest, ByteAlphabetDecodesToEveryByte) {
  const auto tok = tokenizer();
  EXPECT_EQ(tok.vocab_size(), kEot + 1);
  EXPECT_EQ(tok.eos_id(), kEot);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(tok.decode({b}), std::string(1, char(b))) << b;
  EXPECT_EQ(tok.decode({kSpaceThe, kEot}), " the<|endoftext|>");
  expect_error([&] { tok.decode({kEot + 1}); }, "token id 264 is outside");
}

TEST_F(Gpt2BpeTest, MergesApplyByRankLeftToRight) {
  const auto tok = tokenizer();
  const int a = 'a', t = 't';  // byte tokens have the byte's value as id here
  EXPECT_EQ(tok.encode("a"), (std::vector<int32_t>{a}));
  EXPECT_EQ(tok.encode("aaa"), (std::vector<int32_t>{kAa, a}));  // left to right, no overlap
  EXPECT_EQ(tok.encode("aaaa"), (std::vector<int32_t>{kAaaa}));
  EXPECT_EQ(tok.encode("aaaaaaa"), (std::vector<int32_t>{kAaaa, kAa, a}));
  // " the": (Ġ,t) rank 2 before (h,e) rank 3 before (Ġt,he) rank 4; (t,h) rank 6 never applies.
  EXPECT_EQ(tok.encode(" the"), (std::vector<int32_t>{kSpaceThe}));
  // "the": (h,e) rank 3 beats (t,h) rank 6, so "th" never forms.
  EXPECT_EQ(tok.encode("the"), (std::vector<int32_t>{t, kHe}));
  EXPECT_EQ(tok.encode("th"), (std::vector<int32_t>{kTh}));
  // Three spaces then a word: "  " (kept whitespace) + " the".
  EXPECT_EQ(tok.encode("   the"), (std::vector<int32_t>{kTwoSpaces, kSpaceThe}));
  // The same piece twice (the per-thread cache) encodes the same.
  EXPECT_EQ(tok.encode("aaa aaa"), (std::vector<int32_t>{kAa, a, ' ', kAa, a}));
}

TEST_F(Gpt2BpeTest, PreTokenizerIsGpt3EncodersRegex) {
  const auto tok = tokenizer();
  using V = std::vector<std::string>;
  EXPECT_EQ(tok.pre_tokenize("Hello world  foo"), (V{"Hello", " world", " ", " foo"}));
  EXPECT_EQ(tok.pre_tokenize("x   "), (V{"x", "   "}));
  EXPECT_EQ(tok.pre_tokenize("it's they'll I'M"), (V{"it", "'s", " they", "'ll", " I", "'", "M"}));
  EXPECT_EQ(tok.pre_tokenize("12 345x"), (V{"12", " 345", "x"}));
  EXPECT_EQ(tok.pre_tokenize("e\u0301 日本語!!"), (V{"e", "\u0301", " 日本語", "!!"}));  // a mark is no letter
  EXPECT_EQ(tok.pre_tokenize("a\u00a0b\u3000c"), (V{"a", "\u00a0", "b", "\u3000", "c"}));  // Zs is \s
  // ECMAScript's \s: U+FEFF is whitespace; U+0085 (NEL), U+180E and U+200B (ZWSP) are not (PCRE2's
  // own \s says the opposite for the first three).
  EXPECT_EQ(tok.pre_tokenize("a\ufeff\ufeff b"), (V{"a", "\ufeff\ufeff", " b"}));
  EXPECT_EQ(tok.pre_tokenize("x \ufeff!"), (V{"x", " ", "\ufeff", "!"}));
  EXPECT_EQ(tok.pre_tokenize("a\u0085\u200b b"), (V{"a", "\u0085\u200b", " b"}));
  EXPECT_EQ(tok.pre_tokenize("a \u0085b"), (V{"a", " \u0085", "b"}));
  EXPECT_EQ(tok.pre_tokenize("!\u180e!"), (V{"!\u180e!"}));
  EXPECT_EQ(tok.pre_tokenize("\t\n\x0b\x0c\r\u2028\u2029x"), (V{"\t\n\x0b\x0c\r\u2028", "\u2029", "x"}));
  EXPECT_EQ(tok.pre_tokenize("\x01\x02 \x7f"), (V{"\x01\x02", " \x7f"}));
  EXPECT_EQ(tok.pre_tokenize("<|endoftext|>"), (V{"<|", "endoftext", "|>"}));
  EXPECT_EQ(tok.pre_tokenize(""), V{});
  std::string joined;
  for (const auto& p : tok.pre_tokenize(" 😀👨‍👩‍👧 x")) joined += p;
  EXPECT_EQ(joined, " 😀👨‍👩‍👧 x");
}

TEST_F(Gpt2BpeTest, DecodeInvertsEncodeExactly) {
  const auto tok = tokenizer();
  for (const std::string& text :
       {std::string("the aaa  the\n\n\tthe   "), std::string(5000, ' ') + "x" + std::string(3000, 'a'),
        std::string("😀👍🏽 e\u0301 日本語 ＡＢＣ ٣ \x01\x1f\x7f\u0085\ufeff\u2028 it's <|endoftext|> \U0010FFFF"),
        std::string("\r\n\r\n  \u00a0 ")}) {
    EXPECT_EQ(tok.decode(tok.encode(text)), text);
  }
}

TEST_F(Gpt2BpeTest, TextThatIsNotUtf8IsRefused) {
  const auto tok = tokenizer();
  expect_error([&] { tok.encode("ab\xff" "c"); }, "not UTF-8: byte 2 (0xff)");
  expect_error([&] { tok.encode("ok \xed\xa0\x80"); }, "not UTF-8: byte 3");  // a surrogate
  expect_error([&] { tok.encode("caf\xc3"); }, "not UTF-8: byte 3");         // cut short
}

TEST_F(Gpt2BpeTest, ThreadsEncodeAlike) {
  const auto tok = tokenizer();
  std::vector<std::string> texts;
  for (int i = 0; i < 64; ++i) texts.push_back(std::string(i % 7, ' ') + std::string(i, 'a') + " the" + std::to_string(i));
  std::vector<std::vector<int32_t>> serial, parallel(texts.size());
  for (const auto& t : texts) serial.push_back(tok.encode(t));
#pragma omp parallel for num_threads(4)
  for (int i = 0; i < int(texts.size()); ++i) parallel[i] = tok.encode(texts[i]);
  EXPECT_EQ(serial, parallel);
  // A second tokenizer on the same threads must not see the first one's cached words.
  const std::string other_merges = write("other-merges.txt", "#version: 0.2\na a\n");
  const Gpt2BpeTokenizer other(vocab(), other_merges);
  EXPECT_EQ(other.encode("aaaa"), (std::vector<int32_t>{kAa, kAa}));
  EXPECT_EQ(tok.encode("aaaa"), (std::vector<int32_t>{kAaaa}));
}

TEST_F(Gpt2BpeTest, MalformedFilesAreErrors) {
  expect_error([&] { Gpt2BpeTokenizer(write("bad.json", "{\"a\": "), merges()); }, "bad.json is not JSON");
  expect_error([&] { Gpt2BpeTokenizer(write("list.json", "[1, 2]"), merges()); }, "not a JSON object");
  expect_error([&] { Gpt2BpeTokenizer(write("gap.json", "{\"a\": 0, \"b\": 2}"), merges()); },
               "token \"b\" has id 2, but the 2 ids must be 0..1");
  expect_error([&] { Gpt2BpeTokenizer(write("sp.json", "{\"a b\": 0}"), merges()); },
               "holds U+0020, which is not in GPT-2's byte alphabet");
  expect_error([&] { Gpt2BpeTokenizer(write("few.json", "{\"a\": 0}"), merges()); }, "has no token for byte 0x00");
  expect_error([&] { Gpt2BpeTokenizer(vocab(), write("m1.txt", "#version: 0.2\na a\nabc\n")); },
               "m1.txt:3: 'abc' is not a merge");
  expect_error([&] { Gpt2BpeTokenizer(vocab(), write("m2.txt", "#version: 0.2\na b c\n")); },
               "m2.txt:2: 'a b c' is not a merge");
  expect_error([&] { Gpt2BpeTokenizer(vocab(), write("m3.txt", "#version: 0.2\nx y\n")); },
               "m3.txt:2: the merged token 'xy' is not in the vocabulary");
  expect_error([&] { Gpt2BpeTokenizer(vocab(), write("m4.txt", "#version: 0.2\n")); }, "holds no merges");
  expect_error([&] { Gpt2BpeTokenizer((dir_ / "none.json").string(), merges()); }, "none.json not found");
  expect_error([&] { Gpt2BpeTokenizer(vocab(), (dir_ / "none.txt").string()); }, "none.txt not found");
  // Without the "#version" header every line is a merge (CRLF files too).
  const Gpt2BpeTokenizer crlf(vocab(), write("crlf.txt", "a a\r\naa aa\r\n"));
  EXPECT_EQ(crlf.encode("aaaa"), (std::vector<int32_t>{kAaaa}));
}

TEST_F(Gpt2BpeTest, SpecNamesTheTokenizerCompletely) {
  const auto tok = Tokenizer::load(TokenizerSpec{"gpt2-bpe", vocab(), merges()});
  EXPECT_EQ(tok->vocab_size(), kEot + 1);
  EXPECT_EQ(tok->path(), fmt::format("gpt2-bpe ({}, {})", vocab(), merges()));
  expect_error([&] { Tokenizer::load(TokenizerSpec{"gpt2-bpe", vocab(), ""}); }, "needs its vocabulary and merges");
  expect_error([&] { Tokenizer::load(TokenizerSpec{"gpt2-bpe", "", ""}); }, "needs its vocabulary and merges");
  expect_error([&] { Tokenizer::load(TokenizerSpec{"tok.model", vocab(), ""}); },
               "GPT-2 BPE's, but the tokenizer is 'tok.model'");
  expect_error([&] { Tokenizer::load(std::string("gpt2-bpe")); }, "needs its vocabulary and merges");
}

TEST_F(Gpt2BpeTest, ConfigKeysNameTheFiles) {
  const std::string ok = fmt::format("[data]\ntokenizer = \"gpt2-bpe\"\nvocab_file = \"{}\"\nmerge_file = \"{}\"\n",
                                     vocab(), merges());
  const Config cfg = load_config_string(ok, "bpe.toml");
  EXPECT_EQ(load_tokenizer(cfg.data)->eos_id(), kEot);
  // Resolved config round trip keeps the keys.
  EXPECT_EQ(load_config_string(cfg.to_toml(), "resolved.toml").data, cfg.data);
  expect_error([&] { load_config_string("[data]\ntokenizer = \"gpt2-bpe\"\nvocab_file = \"v.json\"\n", "a.toml"); },
               "a.toml:3: data.tokenizer = \"gpt2-bpe\" needs data.vocab_file and data.merge_file");
  expect_error([&] { load_config_string("[data]\ntokenizer = \"t.model\"\nmerge_file = \"m.txt\"\n", "b.toml"); },
               "b.toml:3: data.vocab_file / data.merge_file are GPT-2 BPE's files, but data.tokenizer = \"t.model\"");
  expect_error([&] { load_config_string("[data]\nvocab_file = \"v.json\"\n", "c.toml"); },
               "data.vocab_file / data.merge_file are GPT-2 BPE's files");
  expect_error([&] { load_config_string("[model]\nkind = \"vgg\"\nn_layer = 11\n[data]\nmerge_file = \"m\"\n", "d.toml"); },
               "describe a GPT");
}

}  // namespace
}  // namespace baton
