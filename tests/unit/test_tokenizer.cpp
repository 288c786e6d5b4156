// Tokenizer (SentencePiece BPE) and the text -> dataset -> text round trip: a small tokenizer is
// trained once on generated text; documents (with newlines, repeated spaces and characters never
// seen in training) are encoded, written as an indexed dataset, read back and decoded exactly.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "data/indexed_dataset.h"
#include "data/text_documents.h"
#include "data/tokenizer.h"

namespace baton {
namespace {

namespace fs = std::filesystem;

constexpr int kVocab = 400;

// Pseudo-English documents: sentences of words drawn from a small list.
std::string generated_document(Rng& rng) {
  static const char* words[] = {"the",         "jury",   "said",      "that", "county",
                                "election",    "was",    "conducted", "in",   "a",
                                "manner",      "of",     "city",      "and",  "it",
                                "recommended", "new",    "laws",      "for",  "voters",
                                "Atlanta",     "Fulton", "report",    "1961", "42"};
  std::string doc;
  const int sentences = 3 + static_cast<int>(rng.below(6));
  for (int s = 0; s < sentences; ++s) {
    const int n = 4 + static_cast<int>(rng.below(10));
    for (int w = 0; w < n; ++w) {
      std::string word = words[rng.below(std::size(words))];
      if (w == 0) word[0] = static_cast<char>(std::toupper(word[0]));
      doc += (w ? " " : "") + word;
    }
    doc += rng.below(4) == 0 ? "?\n" : ". ";
  }
  return doc;
}

class TokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("baton-test-tokenizer-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // Two files; documents separated by separator lines, which must not become pieces.
    Rng rng(17);
    for (const char* name : {"a.txt", "b.txt"}) {
      std::ofstream out(dir_ / name);
      for (int d = 0; d < 150; ++d)
        out << generated_document(rng) << "\n" << kDocumentSeparator << "\n";
      files_.push_back((dir_ / name).string());
    }
    model_ = Tokenizer::train(files_, (dir_ / "tok").string(), kVocab);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static inline fs::path dir_;
  static inline std::vector<std::string> files_;
  static inline std::string model_;
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

TEST_F(TokenizerTest, TrainsTheRequestedVocabulary) {
  EXPECT_EQ(model_, (dir_ / "tok.model").string());
  EXPECT_TRUE(fs::exists(dir_ / "tok.vocab"));
  auto tok = Tokenizer::load(model_);
  EXPECT_EQ(tok->vocab_size(), kVocab);
  EXPECT_EQ(tok->eos_id(), 1);
  EXPECT_EQ(tok->path(), model_);
  // Frequent words became single pieces (BPE merges happened) ...
  EXPECT_EQ(tok->encode("the").size(), 1u);
  // ... and the separator line was never training text.
  std::ifstream vocab(dir_ / "tok.vocab");
  std::string line;
  while (std::getline(vocab, line)) EXPECT_EQ(line.find("endof"), std::string::npos) << line;
}

TEST_F(TokenizerTest, TextSurvivesDatasetRoundTripExactly) {
  auto tok = Tokenizer::load(model_);
  Rng rng(99);
  std::vector<std::string> docs = {
      generated_document(rng),
      "Two  spaces,\ttabs and\nnew lines\n\nstay.",
      "Unseen characters: naïve café — ✓ 日本 {}[]~",  // byte fallback, no <unk>
      " leading and trailing spaces ",
  };
  const std::string prefix = (dir_ / "roundtrip").string();
  IndexedDatasetWriter w(prefix, token_dtype_for_vocab(tok->vocab_size()));
  for (const auto& d : docs) {
    auto ids = tok->encode(d);
    for (int32_t id : ids) EXPECT_NE(id, 0) << "<unk> in encoding of: " << d;
    ids.push_back(tok->eos_id());
    w.add_document(ids);
  }
  w.finalize();

  auto ds = IndexedDataset::open(prefix);
  EXPECT_EQ(ds->dtype(), TokenDType::U16);
  ASSERT_EQ(ds->num_sequences(), static_cast<int64_t>(docs.size()));
  EXPECT_LT(ds->max_token_id(), kVocab);
  for (size_t i = 0; i < docs.size(); ++i) {
    auto ids = ds->sequence(static_cast<int64_t>(i));
    ASSERT_EQ(ids.back(), tok->eos_id());
    ids.pop_back();
    EXPECT_EQ(tok->decode(ids), docs[i]);
  }
}

TEST_F(TokenizerTest, DecodeRejectsIdsOutsideTheVocabulary) {
  auto tok = Tokenizer::load(model_);
  expect_error([&] { tok->decode({5, kVocab}); }, "token id 400");
}

TEST_F(TokenizerTest, MissingOrInvalidModelIsAnError) {
  expect_error([&] { Tokenizer::load((dir_ / "absent.model").string()); }, "not found");
  const auto bogus = dir_ / "bogus.model";
  std::ofstream(bogus) << "this is not a sentencepiece model";
  expect_error([&] { Tokenizer::load(bogus.string()); }, "cannot load");
}

TEST_F(TokenizerTest, VocabularyTooLargeForTheTextIsAnError) {
  const auto tiny = dir_ / "tiny.txt";
  std::ofstream(tiny) << "a small text with few words\n";
  const std::string prefix = (dir_ / "big").string();
  expect_error([&] { Tokenizer::train({tiny.string()}, prefix, 5000); }, "5000");
  EXPECT_FALSE(fs::exists(prefix + ".model")) << "a failed training left a model behind";
}

TEST_F(TokenizerTest, VocabularyTooSmallForByteFallbackIsAnError) {
  expect_error([&] { Tokenizer::train(files_, (dir_ / "small").string(), 100); }, "too small");
}

TEST_F(TokenizerTest, MissingTrainingInputIsAnError) {
  expect_error(
      [&] { Tokenizer::train({(dir_ / "nope.txt").string()}, (dir_ / "x").string(), 300); },
      "nope.txt");
}

TEST(DocumentReaderTest, SplitsAtSeparatorLinesAndFileEnds) {
  const auto path =
      fs::temp_directory_path() / ("baton-docs-" + std::to_string(::getpid()) + ".txt");
  std::ofstream(path) << "first\nline two\n<|endoftext|>\n<|endoftext|>\r\n  \n<|endoftext|>\n"
                         "second <|endoftext|> inline stays\n<|endoftext|>\nthird";
  DocumentReader reader(path.string());
  std::vector<std::string> docs;
  std::string doc;
  while (reader.next(doc)) docs.push_back(doc);
  fs::remove(path);
  EXPECT_EQ(docs, (std::vector<std::string>{"first\nline two", "second <|endoftext|> inline stays",
                                            "third"}));
}

}  // namespace
}  // namespace baton
