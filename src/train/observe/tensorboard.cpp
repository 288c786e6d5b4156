#include "train/observe/tensorboard.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "train/observe/tensorboard.pb.h"

namespace baton {
namespace {

// The byte-at-a-time table of the reflected Castagnoli polynomial.
constexpr std::array<uint32_t, 256> crc32c_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kCrc32cTable = crc32c_table();

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

const char* const kHint =
    "free space in run.dir (or point run.dir elsewhere), or set run.tensorboard = false; metrics.jsonl has the "
    "same values";

}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = kCrc32cTable[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t crc = crc32c(data, n);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string tfrecord(const std::string& payload) {
  std::string out;
  out.reserve(payload.size() + 16);
  put_le(out, payload.size(), 8);
  put_le(out, masked_crc32c(out.data(), 8), 4);
  out += payload;
  put_le(out, masked_crc32c(payload.data(), payload.size()), 4);
  return out;
}

std::vector<std::pair<std::string, double>> tensorboard_scalars(const StepMetrics& m) {
  std::vector<std::pair<std::string, double>> s = {
      {"train/loss", m.loss}, {"train/lr", m.lr}, {"train/grad_norm", m.grad_norm}};
  if (m.val_loss) s.emplace_back("val/loss", *m.val_loss);
  for (const auto& [name, value] : m.val_metrics) s.emplace_back("val/" + name, value);
  s.emplace_back("perf/step_ms", m.step_ms);
  // An image model's tokens_per_s is its images_per_s (one "token" per image): written once.
  if (m.images_per_s)
    s.emplace_back("perf/images_per_s", *m.images_per_s);
  else
    s.emplace_back("perf/tokens_per_s", m.tokens_per_s);
  s.emplace_back("perf/tflops_per_gpu", m.tflops_per_gpu);
  if (m.mfu) s.emplace_back("perf/mfu", *m.mfu);
  if (m.comm_share) s.emplace_back("perf/comm_share", *m.comm_share);
  if (m.rewinds > 0 || m.batches_skipped > 0) {
    s.emplace_back("train/rewinds", m.rewinds);
    s.emplace_back("train/batches_skipped", static_cast<double>(m.batches_skipped));
  }
  if (m.vw) {
    const VwMetrics& v = *m.vw;
    for (const auto& [key, value] : std::initializer_list<std::pair<const char*, double>>{
             {"clock", v.clock},
             {"c_global", v.c_global},
             {"staleness", v.staleness},
             {"wait_s", v.wait_s},
             {"wait_total_s", v.wait_total_s},
             {"push_s", v.push_s},
             {"idle_s", v.idle_s},
             {"idle_total_s", v.idle_total_s},
             {"minibatches_per_s", v.minibatches_per_s},
             {"slowdown", v.slowdown},
             {"stretch_s", v.stretch_s}})
      s.emplace_back(std::string("vw/") + key, value);
  }
  return s;
}

// TensorBoard reads a directory's events files in name order, so a new file's seconds are past every
// existing file's there (a resume within the second of a crash: its pid need not sort after).
std::string tensorboard_file_path(const std::string& dir) {
  int64_t seconds = static_cast<int64_t>(unix_seconds());
  const std::string prefix = "events.out.tfevents.";
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string digits = name.substr(prefix.size(), name.find('.', prefix.size()) - prefix.size());
    if (!digits.empty() && digits.size() <= 18 && digits.find_first_not_of("0123456789") == std::string::npos)
      seconds = std::max<int64_t>(seconds, std::stoll(digits) + 1);
  }
  char host[256] = "localhost";
  if (gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "localhost");
  host[sizeof host - 1] = '\0';
  return fmt::format("{}/{}{:010d}.{}.{}", dir, prefix, seconds, host, static_cast<int>(getpid()));
}

TensorBoardWriter::TensorBoardWriter(const std::string& path, int64_t first_step) : path_(path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  file_ = std::fopen(path_.c_str(), "wb");
  BATON_REQUIRE(file_ != nullptr, fmt::format("cannot create {}: {}", path_, std::strerror(errno)), kHint);
  tensorboard::Event e;
  e.set_wall_time(unix_seconds());
  e.set_file_version("brain.Event:2");
  append(e.SerializeAsString());
  restart(first_step);
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

void TensorBoardWriter::restart(int64_t first_step) {
  tensorboard::Event e;
  e.set_wall_time(unix_seconds());
  e.set_step(first_step);
  e.mutable_session_log()->set_status(tensorboard::SessionLog::START);
  append(e.SerializeAsString());
}

void TensorBoardWriter::write(const StepMetrics& m) {
  tensorboard::Event e;
  e.set_wall_time(unix_seconds());
  e.set_step(m.step);
  tensorboard::Summary* summary = e.mutable_summary();
  for (const auto& [tag, value] : tensorboard_scalars(m)) {
    tensorboard::Summary::Value* v = summary->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  append(e.SerializeAsString());
}

// A record is written whole and flushed (TensorBoard reads the file while it grows); a failed write
// is one error, as metrics.jsonl's.
void TensorBoardWriter::append(const std::string& event_bytes) {
  const std::string record = tfrecord(event_bytes);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() || std::fflush(file_) != 0)
    throw Error(fmt::format("cannot write {}: {}", path_, std::strerror(errno)), kHint);
}

}  // namespace baton
