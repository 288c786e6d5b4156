// TokenLoader: batches are pure functions of (seed, step, row); data-parallel slices assemble the
// global batch exactly; validation windows tile the dataset in order; tokenizer/dataset mismatch
// is caught. The dataset's token at position p is p (mod a prime), so every window can be checked.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "data/indexed_dataset.h"
#include "data/token_loader.h"

namespace baton {
namespace {

namespace fs = std::filesystem;

constexpr int32_t kModulus = 65521;  // token at stream position p is p % kModulus

class TokenLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("baton-test-loader-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A dataset of `tokens` tokens cut into documents of varying length.
  std::unique_ptr<IndexedDataset> make_dataset(int64_t tokens, const std::string& name = "ds") {
    const std::string prefix = (dir_ / name).string();
    IndexedDatasetWriter w(prefix, TokenDType::U16);
    std::vector<int32_t> doc;
    for (int64_t p = 0; p < tokens; ++p) {
      doc.push_back(static_cast<int32_t>(p % kModulus));
      if (doc.size() == 1 + static_cast<size_t>(p % 97) || p + 1 == tokens) {
        w.add_document(doc);
        doc.clear();
      }
    }
    w.finalize();
    return IndexedDataset::open(prefix);
  }
  fs::path dir_;
};

struct Batch {
  std::vector<int32_t> inputs, targets;
  Batch(int rows, int seq_len) : inputs(rows * seq_len), targets(rows * seq_len) {}
  bool operator==(const Batch&) const = default;
};

Batch train_batch(const TokenLoader& loader, int64_t step, int rows) {
  Batch b(rows, loader.seq_len());
  loader.train_rows(step, 0, rows, b.inputs.data(), b.targets.data());
  return b;
}

// Each row is a contiguous stretch of the stream starting at `start`, targets shifted by one.
void expect_window(const int32_t* inputs, const int32_t* targets, int seq_len, int64_t start) {
  for (int t = 0; t < seq_len; ++t) {
    ASSERT_EQ(inputs[t], (start + t) % kModulus) << "position " << t;
    ASSERT_EQ(targets[t], (start + t + 1) % kModulus) << "position " << t;
  }
}

TEST_F(TokenLoaderTest, RowsAreWindowsAtTheDocumentedHashPosition) {
  auto ds = make_dataset(5000);
  const int T = 16;
  const uint64_t seed = 1234;
  TokenLoader loader(*ds, T, seed);
  for (int64_t step : {0, 1, 7, 100000}) {
    Batch b = train_batch(loader, step, 4);
    for (int r = 0; r < 4; ++r) {
      // The contract others (and resumed runs) rely on: row r of step s starts here.
      const int64_t start = static_cast<int64_t>(
          mix({seed, static_cast<uint64_t>(step), static_cast<uint64_t>(r)}) % (5000 - T));
      expect_window(&b.inputs[r * T], &b.targets[r * T], T, start);
    }
  }
}

TEST_F(TokenLoaderTest, SameSeedAndStepGiveTheSameBatch) {
  auto ds = make_dataset(20000);
  TokenLoader a(*ds, 32, 7), b(*ds, 32, 7), other_seed(*ds, 32, 8);
  EXPECT_EQ(train_batch(a, 5, 8), train_batch(b, 5, 8));
  EXPECT_EQ(train_batch(a, 5, 8), train_batch(a, 5, 8));  // no hidden state
  EXPECT_NE(train_batch(a, 5, 8), train_batch(a, 6, 8));
  EXPECT_NE(train_batch(a, 5, 8), train_batch(other_seed, 5, 8));
}

TEST_F(TokenLoaderTest, DataParallelSlicesConcatenateToTheGlobalBatch) {
  auto ds = make_dataset(20000);
  const int T = 24, global = 12;
  TokenLoader loader(*ds, T, 99);
  for (int64_t step : {0, 3, 41}) {
    const Batch full = train_batch(loader, step, global);
    for (int dp : {1, 2, 3, 4, 6, 12}) {
      const int n = global / dp;
      Batch assembled(global, T);
      for (int rank = 0; rank < dp; ++rank)
        loader.train_rows(step, rank * n, n, &assembled.inputs[rank * n * T],
                          &assembled.targets[rank * n * T]);
      EXPECT_EQ(assembled, full) << "dp=" << dp << " step=" << step;
    }
  }
}

TEST_F(TokenLoaderTest, ConcurrentCallersSeeTheSameData) {
  auto ds = make_dataset(20000);
  const int T = 32, rows = 8, steps = 64;
  TokenLoader loader(*ds, T, 5);
  std::vector<Batch> serial, parallel(steps, Batch(rows, T));
  for (int s = 0; s < steps; ++s) serial.push_back(train_batch(loader, s, rows));
#pragma omp parallel for num_threads(4)
  for (int s = 0; s < steps; ++s)
    loader.train_rows(s, 0, rows, parallel[s].inputs.data(), parallel[s].targets.data());
  EXPECT_EQ(serial, parallel);
}

TEST_F(TokenLoaderTest, SmallestDatasetReachesBothEnds) {
  const int T = 8;
  auto ds = make_dataset(T + 2);  // exactly two possible windows
  TokenLoader loader(*ds, T, 3);
  std::set<int32_t> starts;
  for (int s = 0; s < 64; ++s) {
    Batch b = train_batch(loader, s, 1);
    starts.insert(b.inputs[0]);
    expect_window(b.inputs.data(), b.targets.data(), T, b.inputs[0]);
  }
  EXPECT_EQ(starts, (std::set<int32_t>{0, 1}));
}

TEST_F(TokenLoaderTest, EvalBatchesTileTheDatasetInOrderAndWrap) {
  const int T = 10, rows = 4;
  auto ds = make_dataset(123);
  TokenLoader loader(*ds, T, 1);
  EXPECT_EQ(loader.eval_windows(), 12);  // (123 - 1) / 10
  int64_t window = 0;
  for (int64_t index = 0; index < 5; ++index) {  // 20 rows: wraps once after 12 windows
    Batch b(rows, T);
    loader.eval_rows(index, rows, 0, rows, b.inputs.data(), b.targets.data());
    for (int r = 0; r < rows; ++r, ++window)
      expect_window(&b.inputs[r * T], &b.targets[r * T], T, (window % 12) * T);
    // A rank's slice of the eval batch equals the same rows of the whole batch.
    Batch slice(2, T);
    loader.eval_rows(index, rows, 2, 2, slice.inputs.data(), slice.targets.data());
    EXPECT_TRUE(std::equal(slice.inputs.begin(), slice.inputs.end(), b.inputs.begin() + 2 * T));
  }
}

TEST_F(TokenLoaderTest, RejectsDatasetsTooSmallForOneWindow) {
  auto ds = make_dataset(9);
  try {
    TokenLoader loader(*ds, 8, 1);
    FAIL() << "expected baton::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("9 tokens"), std::string::npos) << e.what();
    EXPECT_FALSE(e.hint().empty());
  }
  EXPECT_THROW(TokenLoader(*ds, 0, 1), Error);
}

TEST_F(TokenLoaderTest, TokenizerMismatchIsAnError) {
  auto ds = make_dataset(1000);  // largest id 999
  EXPECT_NO_THROW(check_tokenizer_matches(*ds, 1000, "tok.model"));
  try {
    check_tokenizer_matches(*ds, 999, "tok.model");
    FAIL() << "expected baton::Error";
  } catch (const Error& e) {
    const std::string what = e.what();
    for (const char* part : {"token id 999", "tok.model", "only 999 tokens", "ds"})
      EXPECT_NE(what.find(part), std::string::npos) << what << " lacks " << part;
    EXPECT_FALSE(e.hint().empty());
  }
}

}  // namespace
}  // namespace baton
