// Indexed dataset (Megatron MMIDIDX): exact on-disk layout, write/read round trips for uint16 and
// int32 tokens, and rejection of every kind of damaged file with a message naming the problem.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "data/indexed_dataset.h"

namespace baton {
namespace {

namespace fs = std::filesystem;

class DatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("baton-test-dataset-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string prefix(const std::string& name = "ds") const { return (dir_ / name).string(); }
  fs::path dir_;
};

std::vector<std::vector<int32_t>> random_docs(int n, int32_t max_id, uint64_t seed) {
  Rng rng(seed);
  std::vector<std::vector<int32_t>> docs(n);
  for (auto& d : docs) {
    d.resize(rng.below(50));  // includes empty documents
    for (auto& t : d) t = static_cast<int32_t>(rng.below(static_cast<uint64_t>(max_id) + 1));
  }
  docs[0].push_back(max_id);  // the largest id is present
  return docs;
}

void write_dataset(const std::string& prefix, TokenDType dtype,
                   const std::vector<std::vector<int32_t>>& docs) {
  IndexedDatasetWriter w(prefix, dtype);
  for (const auto& d : docs) w.add_document(d);
  w.finalize();
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

template <typename T>
void put(std::vector<uint8_t>& b, T v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  b.insert(b.end(), p, p + sizeof(T));
}

template <typename T>
T get(const std::vector<uint8_t>& b, size_t at) {
  T v;
  std::memcpy(&v, b.data() + at, sizeof(T));
  return v;
}

// An .idx built field by field, the way Megatron-LM's _IndexWriter writes it.
std::vector<uint8_t> raw_idx(uint8_t code, const std::vector<int32_t>& sizes,
                             const std::vector<int64_t>& pointers,
                             const std::vector<int64_t>& doc_idx) {
  const uint8_t magic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
  std::vector<uint8_t> b(magic, magic + 9);
  put<uint64_t>(b, 1);
  put<uint8_t>(b, code);
  put<uint64_t>(b, sizes.size());
  put<uint64_t>(b, doc_idx.size());
  for (auto s : sizes) put(b, s);
  for (auto p : pointers) put(b, p);
  for (auto d : doc_idx) put(b, d);
  return b;
}

// Runs fn, expects a baton::Error whose message contains every string in `parts` and a hint.
void expect_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    FAIL() << "expected baton::Error containing '" << parts.front() << "'";
  } catch (const Error& e) {
    for (const auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "message: " << e.what() << "\nmissing: " << p;
    EXPECT_FALSE(e.hint().empty()) << "no hint for: " << e.what();
  }
}

TEST(TokenDTypeTest, SmallestTypeThatHoldsTheVocabulary) {
  EXPECT_EQ(token_dtype_for_vocab(50257), TokenDType::U16);
  EXPECT_EQ(token_dtype_for_vocab(65536), TokenDType::U16);  // ids 0..65535
  EXPECT_EQ(token_dtype_for_vocab(65537), TokenDType::I32);
  EXPECT_EQ(token_dtype_for_vocab(256000), TokenDType::I32);
}

TEST_F(DatasetTest, RoundTripUint16) {
  const auto docs = random_docs(40, 65535, 1);
  write_dataset(prefix(), TokenDType::U16, docs);
  auto ds = IndexedDataset::open(prefix());
  EXPECT_EQ(ds->dtype(), TokenDType::U16);
  ASSERT_EQ(ds->num_sequences(), 40);
  std::vector<int32_t> all;
  for (size_t i = 0; i < docs.size(); ++i) {
    EXPECT_EQ(ds->sequence_length(static_cast<int64_t>(i)), static_cast<int64_t>(docs[i].size()));
    EXPECT_EQ(ds->sequence(static_cast<int64_t>(i)), docs[i]) << "sequence " << i;
    all.insert(all.end(), docs[i].begin(), docs[i].end());
  }
  ASSERT_EQ(ds->num_tokens(), static_cast<int64_t>(all.size()));
  // read_tokens spans sequence boundaries: the dataset is one token stream.
  std::vector<int32_t> span(all.size() - 7);
  ds->read_tokens(3, static_cast<int64_t>(span.size()), span.data());
  EXPECT_TRUE(std::equal(span.begin(), span.end(), all.begin() + 3));
  EXPECT_EQ(ds->max_token_id(), 65535);
  EXPECT_EQ(ds->max_token_id(), 65535);  // cached value
}

TEST_F(DatasetTest, RoundTripInt32KeepsLargeIds) {
  const auto docs = random_docs(25, 255999, 2);
  write_dataset(prefix(), TokenDType::I32, docs);
  auto ds = IndexedDataset::open(prefix());
  EXPECT_EQ(ds->dtype(), TokenDType::I32);
  for (size_t i = 0; i < docs.size(); ++i)
    EXPECT_EQ(ds->sequence(static_cast<int64_t>(i)), docs[i]);
  EXPECT_EQ(ds->max_token_id(), 255999);
}

TEST_F(DatasetTest, ExactMegatronLayout) {
  const std::vector<std::vector<int32_t>> docs = {{5, 6, 7}, {}, {9, 1}};
  write_dataset(prefix(), TokenDType::U16, docs);
  const auto idx = read_bytes(prefix() + ".idx");
  const auto expected = raw_idx(8, {3, 0, 2}, {0, 6, 6}, {0, 1, 2, 3});
  EXPECT_EQ(idx, expected);
  ASSERT_EQ(idx.size(), 34u + 3 * 4 + 3 * 8 + 4 * 8);
  EXPECT_EQ(std::memcmp(idx.data(), "MMIDIDX\0\0", 9), 0);
  EXPECT_EQ(get<uint64_t>(idx, 9), 1u);  // version
  EXPECT_EQ(idx[17], 8);                 // uint16
  const auto bin = read_bytes(prefix() + ".bin");
  ASSERT_EQ(bin.size(), 10u);
  EXPECT_EQ(get<uint16_t>(bin, 0), 5);
  EXPECT_EQ(get<uint16_t>(bin, 8), 1);

  write_dataset(prefix("wide"), TokenDType::I32, docs);
  EXPECT_EQ(read_bytes(prefix("wide") + ".idx")[17], 4);  // int32
  EXPECT_EQ(read_bytes(prefix("wide") + ".bin").size(), 20u);
}

TEST_F(DatasetTest, ReadsMegatronFilesWithSeveralSequencesPerDocumentAndModes) {
  // Megatron may split a document into several sequences and, for multimodal data, append one
  // int8 mode per sequence; both must read.
  auto idx = raw_idx(4, {2, 1, 3}, {0, 8, 12}, {0, 2, 3});
  idx.insert(idx.end(), {0, 0, 0});
  write_bytes(prefix() + ".idx", idx);
  std::vector<uint8_t> bin;
  for (int32_t t : {10, 11, 12, 13, 14, 70000}) put(bin, t);
  write_bytes(prefix() + ".bin", bin);
  auto ds = IndexedDataset::open(prefix());
  EXPECT_EQ(ds->num_sequences(), 3);
  EXPECT_EQ(ds->sequence(2), (std::vector<int32_t>{13, 14, 70000}));
  EXPECT_EQ(ds->max_token_id(), 70000);
}

TEST_F(DatasetTest, EmptyDataset) {
  write_dataset(prefix(), TokenDType::U16, {});
  auto ds = IndexedDataset::open(prefix());
  EXPECT_EQ(ds->num_sequences(), 0);
  EXPECT_EQ(ds->num_tokens(), 0);
  EXPECT_EQ(ds->max_token_id(), -1);
}

TEST_F(DatasetTest, WriterRejectsIdsTheTypeCannotHold) {
  IndexedDatasetWriter w(prefix(), TokenDType::U16);
  const std::vector<int32_t> doc = {1, 65536};
  expect_error([&] { w.add_document(doc); }, {"65536", "uint16"});
  const std::vector<int32_t> negative = {-1};
  expect_error([&] { w.add_document(negative); }, {"-1"});
}

TEST_F(DatasetTest, UnfinishedWriterLeavesNothingBehind) {
  {
    IndexedDatasetWriter w(prefix(), TokenDType::U16);
    w.add_document(std::vector<int32_t>{1, 2, 3});
    EXPECT_EQ(w.tokens_written(), 3);
  }
  EXPECT_TRUE(fs::is_empty(dir_)) << "temporary or final files left after an abandoned build";
}

TEST_F(DatasetTest, RewriteReplacesOnlyOnFinalize) {
  write_dataset(prefix(), TokenDType::U16, {{1, 2, 3}});
  {
    IndexedDatasetWriter w(prefix(), TokenDType::U16);
    w.add_document(std::vector<int32_t>{4, 5});
    // Not finalized: the old dataset is still intact.
    EXPECT_EQ(IndexedDataset::open(prefix())->num_tokens(), 3);
    w.finalize();
  }
  EXPECT_EQ(IndexedDataset::open(prefix())->sequence(0), (std::vector<int32_t>{4, 5}));
}

TEST_F(DatasetTest, WriterNeedsAnExistingDirectory) {
  expect_error(
      [&] { IndexedDatasetWriter w((dir_ / "no" / "such" / "ds").string(), TokenDType::U16); },
      {"cannot create"});
}

// Each case damages a good dataset and expects open() to fail naming the file and the problem.
TEST_F(DatasetTest, RejectsDamagedFiles) {
  const std::vector<std::vector<int32_t>> docs = {{1, 2, 3}, {4, 5}, {6}};
  struct Case {
    const char* name;
    std::function<void(std::vector<uint8_t>& idx, std::vector<uint8_t>& bin)> damage;
    std::vector<std::string> expect;
  };
  const std::vector<Case> cases = {
      {"idx truncated in header", [](auto& idx, auto&) { idx.resize(20); }, {".idx", "truncated"}},
      {"idx truncated in arrays",
       [](auto& idx, auto&) { idx.resize(idx.size() - 5); },
       {".idx", "truncated"}},
      {"empty idx", [](auto& idx, auto&) { idx.clear(); }, {".idx", "truncated"}},
      {"bad magic", [](auto& idx, auto&) { idx[0] = 'X'; }, {".idx", "bad magic"}},
      {"version", [](auto& idx, auto&) { idx[9] = 2; }, {".idx", "version 2"}},
      {"int64 dtype", [](auto& idx, auto&) { idx[17] = 5; }, {".idx", "int64"}},
      {"unknown dtype", [](auto& idx, auto&) { idx[17] = 42; }, {".idx", "unknown", "42"}},
      {"huge sequence count", [](auto& idx, auto&) { idx[25] = 0x7f; }, {".idx", "truncated"}},
      {"bin truncated",
       [](auto&, auto& bin) { bin.resize(bin.size() - 2); },
       {".bin", "bytes", "6 tokens"}},
      {"bin too long", [](auto&, auto& bin) { bin.resize(bin.size() + 2); }, {".bin", "bytes"}},
      {"bad pointer",
       [](auto& idx, auto&) { idx[34 + 3 * 4 + 8] = 7; },  // pointers[1]
       {".idx", "sequence 1 starts at byte 7"}},
      {"negative size", [](auto& idx, auto&) { idx[34 + 3] = 0x80; }, {".idx", "negative"}},
      {"doc index decreasing",
       [](auto& idx, auto&) { idx[34 + 3 * 12 + 2 * 8] = 0; },  // doc_idx = 0 1 0 3
       {".idx", "document index"}},
      {"doc index beyond sequences",
       [](auto& idx, auto&) { idx[idx.size() - 8] = 9; },
       {".idx", "document index"}},
  };
  write_dataset(prefix("good"), TokenDType::U16, docs);
  const auto good_idx = read_bytes(prefix("good") + ".idx");
  const auto good_bin = read_bytes(prefix("good") + ".bin");
  ASSERT_NO_THROW(IndexedDataset::open(prefix("good")));
  expect_error([&] { IndexedDataset::open(prefix("absent")); }, {"absent.idx"});
  write_bytes(prefix("nobin") + ".idx", good_idx);
  expect_error([&] { IndexedDataset::open(prefix("nobin")); }, {"nobin.bin"});

  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].name);
    auto idx = good_idx;
    auto bin = good_bin;
    cases[i].damage(idx, bin);
    const std::string p = prefix("case" + std::to_string(i));
    write_bytes(p + ".idx", idx);
    write_bytes(p + ".bin", bin);
    auto parts = cases[i].expect;
    parts.push_back("case" + std::to_string(i));  // the message names the file
    expect_error([&] { IndexedDataset::open(p); }, parts);
  }
}

}  // namespace
}  // namespace baton
