// run.tensorboard's event files (train/observe/tensorboard.h): CRC32C against published check values,
// TFRecord framing, the tag of every metrics.jsonl number, and a failed write as one Error. The
// Event protos are decoded by e2e/test_tensorboard.sh (python3-protobuf, against metrics.jsonl).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>

#include "core/error.h"
#include "train/observe/tensorboard.h"

namespace baton {
namespace {

uint32_t le32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}

TEST(TensorBoard, Crc32cCheckValues) {
  // The CRC-32C check value and RFC 3720's (iSCSI) B.4 examples.
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  const std::string zeros(32, '\0'), ones(32, '\xff');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  std::string incr(32, '\0');
  for (int i = 0; i < 32; ++i) incr[i] = static_cast<char>(i);
  EXPECT_EQ(crc32c(incr.data(), incr.size()), 0x46DD794Eu);
  // Continuing a CRC over a split buffer gives the whole buffer's.
  EXPECT_EQ(crc32c("6789", 4, crc32c("12345", 5)), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
}

TEST(TensorBoard, MaskedCrcAndRecordFraming) {
  const uint32_t crc = 0xE3069283u;
  EXPECT_EQ(masked_crc32c("123456789", 9), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
  const std::string payload = "an event";
  const std::string r = tfrecord(payload);
  ASSERT_EQ(r.size(), 8 + 4 + payload.size() + 4);
  EXPECT_EQ(r.substr(0, 8), std::string("\x08\0\0\0\0\0\0\0", 8));  // uint64 length, little-endian
  EXPECT_EQ(le32(r, 8), masked_crc32c(r.data(), 8));
  EXPECT_EQ(r.substr(12, payload.size()), payload);
  EXPECT_EQ(le32(r, 12 + payload.size()), masked_crc32c(payload.data(), payload.size()));
}

TEST(TensorBoard, EveryMetricsNumberHasItsTag) {
  StepMetrics m;
  m.step = 7;
  m.loss = 2.5;
  m.lr = 1e-3;
  m.grad_norm = 0.75;
  m.step_ms = 12;
  m.tokens_per_s = 1000;
  m.tflops_per_gpu = 0.5;
  std::map<std::string, double> s;
  for (const auto& [tag, v] : tensorboard_scalars(m)) EXPECT_TRUE(s.emplace(tag, v).second) << tag;
  EXPECT_EQ(s, (std::map<std::string, double>{{"train/loss", 2.5},
                                              {"train/lr", 1e-3},
                                              {"train/grad_norm", 0.75},
                                              {"perf/step_ms", 12},
                                              {"perf/tokens_per_s", 1000},
                                              {"perf/tflops_per_gpu", 0.5}}));

  // An image model's evaluation step on several ranks, after a rewind, in a virtual worker.
  m.mfu = 0.4;
  m.comm_share = 0.25;
  m.val_loss = 1.5;
  m.images_per_s = 1000;
  m.val_metrics = {{"top1", 0.5}, {"top5", 0.9}};
  m.rewinds = 1;
  m.batches_skipped = 3;
  m.vw = VwMetrics{.vw = 2, .clock = 4, .c_global = 3, .staleness = 1, .wait_s = 0.1, .wait_total_s = 0.2,
                   .push_s = 0.3, .idle_s = 0.4, .idle_total_s = 0.5, .minibatches_per_s = 6, .slowdown = 2,
                   .stretch_s = 0.7};
  s.clear();
  for (const auto& [tag, v] : tensorboard_scalars(m)) EXPECT_TRUE(s.emplace(tag, v).second) << tag;
  EXPECT_FALSE(s.contains("perf/tokens_per_s"));  // = images_per_s: written once
  EXPECT_EQ(s.at("perf/images_per_s"), 1000);
  EXPECT_EQ(s.at("perf/mfu"), 0.4);
  EXPECT_EQ(s.at("perf/comm_share"), 0.25);
  EXPECT_EQ(s.at("val/loss"), 1.5);
  EXPECT_EQ(s.at("val/top1"), 0.5);
  EXPECT_EQ(s.at("val/top5"), 0.9);
  EXPECT_EQ(s.at("train/rewinds"), 1);
  EXPECT_EQ(s.at("train/batches_skipped"), 3);
  EXPECT_EQ(s.at("vw/clock"), 4);
  EXPECT_EQ(s.at("vw/c_global"), 3);
  EXPECT_EQ(s.at("vw/staleness"), 1);
  EXPECT_EQ(s.at("vw/wait_s"), 0.1);
  EXPECT_EQ(s.at("vw/wait_total_s"), 0.2);
  EXPECT_EQ(s.at("vw/push_s"), 0.3);
  EXPECT_EQ(s.at("vw/idle_s"), 0.4);
  EXPECT_EQ(s.at("vw/idle_total_s"), 0.5);
  EXPECT_EQ(s.at("vw/minibatches_per_s"), 6);
  EXPECT_EQ(s.at("vw/slowdown"), 2);
  EXPECT_EQ(s.at("vw/stretch_s"), 0.7);
  EXPECT_FALSE(s.contains("vw/vw"));  // the VW is the directory, not a scalar
  EXPECT_EQ(s.size(), 24u);  // train 5, val 3, perf 5, vw 11
}

TEST(TensorBoard, WritesWholeRecordsWithValidCrcs) {
  const std::string dir = ::testing::TempDir() + "/baton_tensorboard_test";
  std::filesystem::remove_all(dir);
  const std::string path = tensorboard_file_path(dir + "/sub");
  EXPECT_EQ(std::filesystem::path(path).filename().string().rfind("events.out.tfevents.", 0), 0u) << path;
  {
    TensorBoardWriter w(path, 1);
    StepMetrics m;
    m.step = 1;
    w.write(m);
    w.restart(1);
  }
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t at = 0;
  int records = 0;
  while (at < bytes.size()) {
    ASSERT_LE(at + 12, bytes.size());
    uint64_t n = 0;
    std::memcpy(&n, bytes.data() + at, 8);  // (x86: little-endian)
    EXPECT_EQ(le32(bytes, at + 8), masked_crc32c(bytes.data() + at, 8));
    ASSERT_LE(at + 12 + n + 4, bytes.size());
    EXPECT_EQ(le32(bytes, at + 12 + n), masked_crc32c(bytes.data() + at + 12, n));
    at += 12 + n + 4;
    ++records;
  }
  EXPECT_EQ(records, 4);  // file_version, START, the step, START
  EXPECT_NE(bytes.find("brain.Event:2"), std::string::npos);
  // A second file in the same second (a resume right after a crash) still sorts after the first.
  EXPECT_GT(tensorboard_file_path(dir + "/sub"), path);
  std::filesystem::remove_all(dir);
}

TEST(TensorBoard, AFailedWriteIsOneError) {
  try {
    TensorBoardWriter w("/dev/full", 1);  // opens; every flush fails with ENOSPC
    FAIL() << "no error writing to /dev/full";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "cannot write /dev/full: No space left on device");
    EXPECT_NE(e.hint().find("run.tensorboard = false"), std::string::npos) << e.hint();
  }
  const std::string file = ::testing::TempDir() + "/baton_tensorboard_not_a_dir";
  std::ofstream(file) << "x";
  try {
    TensorBoardWriter w(file + "/events.out.tfevents.1", 1);
    FAIL() << "no error creating a file under a file";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("cannot create " + file + "/events.out.tfevents.1: ", 0), 0u) << e.what();
  }
  std::filesystem::remove(file);
}

}  // namespace
}  // namespace baton
