#include "train/checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace baton::safetensors {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors data are little-endian");

constexpr uint64_t kMaxHeader = uint64_t(100) << 20;  // the reference implementation's limit

int dtype_size(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" || dtype == "F8_E5M2") return 1;
  return 0;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf / nan
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: mant · 2^-24
    float f = std::ldexp(float(mant), -24);
    std::memcpy(&bits, &f, 4);
    bits |= sign;
  }
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

void pread_all(int fd, void* dst, size_t n, uint64_t offset, const std::string& path) {
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    BATON_REQUIRE(got > 0, fmt::format("cannot read '{}' at byte {}: {}", path, offset,
                                       got < 0 ? std::strerror(errno) : "unexpected end of file"),
                  "the file is truncated or unreadable; copy it again");
    p += got;
    n -= size_t(got);
    offset += uint64_t(got);
  }
}

void write_all(int fd, const void* src, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(src);
  while (n > 0) {
    const ssize_t put = ::write(fd, p, n);
    if (put < 0 && errno == EINTR) continue;
    BATON_REQUIRE(put > 0, fmt::format("cannot write '{}': {}", path, std::strerror(errno)),
                  "check the free space and permissions of the output directory");
    p += put;
    n -= size_t(put);
  }
}

}  // namespace

int64_t Entry::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Reader::Reader(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  BATON_REQUIRE(fd_ >= 0, fmt::format("cannot open '{}': {}", path, std::strerror(errno)),
                "check the path (a Hugging Face model directory holds model.safetensors)");
  try {
    parse();
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

void Reader::parse() {
  const std::string& path = path_;
  struct stat st {};
  BATON_REQUIRE(::fstat(fd_, &st) == 0, fmt::format("cannot stat '{}': {}", path, std::strerror(errno)),
                "check the file");
  const uint64_t size = uint64_t(st.st_size);
  auto bad = [&](const std::string& what) {
    throw Error(fmt::format("'{}' is not a valid safetensors file: {}", path, what),
                "the file is not a safetensors file, or is truncated; export or download it again");
  };
  if (size < 8) bad("shorter than its 8-byte header length");
  uint64_t n = 0;
  pread_all(fd_, &n, 8, 0, path);
  if (n > kMaxHeader || n > size - 8) bad(fmt::format("header length {} exceeds the file ({} bytes) or 100 MiB", n, size));
  data_start_ = 8 + n;
  const uint64_t data_size = size - data_start_;
  std::string header(n, '\0');
  pread_all(fd_, header.data(), n, 8, path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(header);
  } catch (const nlohmann::json::exception& e) {
    bad(fmt::format("header is not JSON ({})", e.what()));
  }
  if (!j.is_object()) bad("header is not a JSON object");
  for (const auto& [name, v] : j.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) bad("__metadata__ is not an object");
      for (const auto& [k, s] : v.items()) {
        if (!s.is_string()) bad(fmt::format("__metadata__ value of '{}' is not a string", k));
        metadata_[k] = s.get<std::string>();
      }
      continue;
    }
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets") ||
        !v["dtype"].is_string() || !v["shape"].is_array() || !v["data_offsets"].is_array() ||
        v["data_offsets"].size() != 2)
      bad(fmt::format("tensor '{}' lacks dtype, shape or data_offsets [begin, end]", name));
    Entry e;
    e.name = name;
    e.dtype = v["dtype"].get<std::string>();
    const int es = dtype_size(e.dtype);
    if (es == 0) bad(fmt::format("tensor '{}' has an unknown dtype '{}'", name, e.dtype));
    uint64_t numel = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned()) bad(fmt::format("tensor '{}' has a shape entry that is not a non-negative integer", name));
      const uint64_t x = d.get<uint64_t>();
      if (x != 0 && numel > (uint64_t(1) << 50) / x) bad(fmt::format("tensor '{}' is too large", name));
      numel *= x;
      e.shape.push_back(int64_t(x));
    }
    for (const auto& o : v["data_offsets"])
      if (!o.is_number_unsigned()) bad(fmt::format("tensor '{}' has data_offsets that are not non-negative integers", name));
    e.begin = v["data_offsets"][0].get<uint64_t>();
    e.end = v["data_offsets"][1].get<uint64_t>();
    if (e.begin > e.end || e.end > data_size)
      bad(fmt::format("tensor '{}' has bytes [{}, {}) outside the data section ({} bytes)", name, e.begin, e.end, data_size));
    if (e.end - e.begin != numel * uint64_t(es))
      bad(fmt::format("tensor '{}' of shape {} and dtype {} needs {} bytes, its range holds {}", name,
                      v["shape"].dump(), e.dtype, numel * uint64_t(es), e.end - e.begin));
    entries_.push_back(std::move(e));
  }
  std::sort(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& b) { return a.name < b.name; });
}

Reader::~Reader() {
  if (fd_ >= 0) ::close(fd_);
}

const Entry* Reader::find(const std::string& name) const {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), name,
                             [](const Entry& e, const std::string& n) { return e.name < n; });
  return it != entries_.end() && it->name == name ? &*it : nullptr;
}

std::vector<float> Reader::read_f32(const Entry& e) const {
  const size_t n = size_t(e.numel());
  std::vector<float> out(n);
  if (e.dtype == "F32") {
    pread_all(fd_, out.data(), n * 4, data_start_ + e.begin, path_);
  } else if (e.dtype == "F16" || e.dtype == "BF16") {
    std::vector<uint16_t> raw(n);
    pread_all(fd_, raw.data(), n * 2, data_start_ + e.begin, path_);
    const bool bf16 = e.dtype == "BF16";
    for (size_t i = 0; i < n; ++i) {
      if (bf16) {
        const uint32_t bits = uint32_t(raw[i]) << 16;
        std::memcpy(&out[i], &bits, 4);
      } else {
        out[i] = half_to_float(raw[i]);
      }
    }
  } else if (e.dtype == "F64") {
    std::vector<double> raw(n);
    pread_all(fd_, raw.data(), n * 8, data_start_ + e.begin, path_);
    for (size_t i = 0; i < n; ++i) out[i] = float(raw[i]);
  } else {
    throw Error(fmt::format("tensor '{}' of '{}' has dtype {}, not a floating-point type", e.name, path_, e.dtype),
                "the file does not hold model weights baton can load (F32, F16, BF16 or F64)");
  }
  return out;
}

uint64_t write_f32(const std::string& path, std::vector<WriteTensor> tensors,
                   const std::map<std::string, std::string>& metadata) {
  std::sort(tensors.begin(), tensors.end(), [](const WriteTensor& a, const WriteTensor& b) { return a.name < b.name; });
  // The header: nlohmann's objects are ordered by key, so "__metadata__" ('_' sorts before the
  // lower-case names) comes first and the tensors follow in name order, as their bytes do.
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  size_t largest = 0;
  for (const WriteTensor& t : tensors) {
    uint64_t numel = 1;
    for (int64_t d : t.shape) numel *= uint64_t(d);
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + 4 * numel}}};
    offset += 4 * numel;
    largest = std::max<size_t>(largest, numel);
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  BATON_REQUIRE(fd >= 0, fmt::format("cannot create '{}': {}", tmp, std::strerror(errno)),
                "check that the output directory is writable");
  try {
    const uint64_t n = text.size();
    write_all(fd, &n, 8, tmp);
    write_all(fd, text.data(), text.size(), tmp);
    std::vector<float> buf(largest);
    for (const WriteTensor& t : tensors) {
      size_t numel = 1;
      for (int64_t d : t.shape) numel *= size_t(d);
      t.fill(buf.data());
      write_all(fd, buf.data(), numel * 4, tmp);
    }
    BATON_REQUIRE(::fsync(fd) == 0, fmt::format("cannot write '{}': {}", tmp, std::strerror(errno)),
                  "check the free space of the output directory");
  } catch (...) {
    ::close(fd);
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    throw;
  }
  ::close(fd);
  std::filesystem::rename(tmp, path);
  return 8 + text.size() + offset;
}

}  // namespace baton::safetensors
