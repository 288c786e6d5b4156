// Megatron-LM indexed dataset (MMIDIDX): the writer behind `baton data build` and the validating,
// memory-mapped reader behind the training loaders. Layout in indexed_dataset.h.
// Invariants the reader establishes on open (so later reads need no checks): the header is
// complete and known, every array fits the .idx, sequences lie back to back in the .bin from byte
// 0 (what Megatron's builder writes), the .bin is exactly as long as they are, and the document
// index is non-decreasing within [0, sequence count].
#include "data/indexed_dataset.h"

#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "data/mapped_file.h"

namespace baton {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the MMIDIDX format is little endian; big-endian hosts would need byte swaps");

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr uint64_t kVersion = 1;
// magic + version + dtype code + sequence count + document-index count
constexpr size_t kHeaderBytes = sizeof(kMagic) + 8 + 1 + 8 + 8;
constexpr const char* kRebuildHint =
    "the file is damaged or incomplete: rebuild it with `baton data build` (or Megatron-LM's "
    "preprocess_data.py)";

size_t item_bytes(TokenDType dtype) { return dtype == TokenDType::U16 ? 2 : 4; }

const char* dtype_name(uint8_t code) {
  switch (code) {
    case 1: return "uint8";
    case 2: return "int8";
    case 3: return "int16";
    case 4: return "int32";
    case 5: return "int64";
    case 6: return "float64";
    case 7: return "float32";
    case 8: return "uint16";
    default: return nullptr;
  }
}

std::string errno_text() { return std::strerror(errno); }

constexpr const char* kMissingHint =
    "check the dataset prefix (data.train / data.valid name PREFIX for PREFIX.bin and PREFIX.idx), "
    "or build it with `baton data build`";

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

void write_or_throw(std::FILE* f, const void* data, size_t bytes, const std::string& path) {
  if (bytes && std::fwrite(data, 1, bytes, f) != bytes)
    throw Error(fmt::format("cannot write {}: {}", path, errno_text()),
                "check free disk space and permissions of the output directory");
}

}  // namespace

// ---- writer -----------------------------------------------------------------------------------

struct IndexedDatasetWriter::Impl {
  std::string prefix;
  TokenDType dtype;
  std::string bin_tmp, idx_tmp;
  std::FILE* bin = nullptr;
  std::vector<int32_t> sizes;
  std::vector<uint8_t> buffer;  // one document converted to the on-disk dtype
  bool finalized = false;

  void discard() {
    if (bin) std::fclose(bin);
    bin = nullptr;
    std::remove(bin_tmp.c_str());
    std::remove(idx_tmp.c_str());
  }
};

IndexedDatasetWriter::IndexedDatasetWriter(const std::string& prefix, TokenDType dtype)
    : impl_(std::make_unique<Impl>()) {
  BATON_ASSERT(dtype == TokenDType::U16 || dtype == TokenDType::I32, "unsupported token dtype");
  impl_->prefix = prefix;
  impl_->dtype = dtype;
  // Temporary names: a crash or an error mid-build never leaves PREFIX.bin/.idx half written.
  impl_->bin_tmp = prefix + ".bin.tmp";
  impl_->idx_tmp = prefix + ".idx.tmp";
  impl_->bin = std::fopen(impl_->bin_tmp.c_str(), "wb");
  if (!impl_->bin)
    throw Error(fmt::format("cannot create {}: {}", impl_->bin_tmp, errno_text()),
                "check that the output directory exists and is writable");
}

IndexedDatasetWriter::~IndexedDatasetWriter() {
  if (impl_ && !impl_->finalized) impl_->discard();
}

void IndexedDatasetWriter::add_document(std::span<const int32_t> tokens) {
  Impl& s = *impl_;
  BATON_ASSERT(!s.finalized, "add_document after finalize");
  BATON_ASSERT(tokens.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()),
               "document of {} tokens exceeds the format's int32 sequence length", tokens.size());
  const int64_t hi = s.dtype == TokenDType::U16 ? 65535 : std::numeric_limits<int32_t>::max();
  s.buffer.resize(tokens.size() * item_bytes(s.dtype));
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t t = tokens[i];
    if (t < 0 || t > hi)
      throw Error(fmt::format("token id {} does not fit the dataset's {} tokens", t,
                              s.dtype == TokenDType::U16 ? "uint16" : "int32"),
                  "the tokenizer's vocabulary is larger than the chosen token type allows");
    if (s.dtype == TokenDType::U16) {
      const uint16_t v = static_cast<uint16_t>(t);
      std::memcpy(&s.buffer[2 * i], &v, 2);
    } else {
      std::memcpy(&s.buffer[4 * i], &t, 4);
    }
  }
  write_or_throw(s.bin, s.buffer.data(), s.buffer.size(), s.bin_tmp);
  s.sizes.push_back(static_cast<int32_t>(tokens.size()));
  tokens_ += static_cast<int64_t>(tokens.size());
}

void IndexedDatasetWriter::finalize() {
  Impl& s = *impl_;
  BATON_ASSERT(!s.finalized, "finalize called twice");
  try {
    if (std::fclose(s.bin) != 0) {
      s.bin = nullptr;
      throw Error(fmt::format("cannot write {}: {}", s.bin_tmp, errno_text()),
                  "check free disk space");
    }
    s.bin = nullptr;

    const uint64_t n = s.sizes.size();
    std::vector<int64_t> pointers(n);
    int64_t offset = 0;
    for (uint64_t i = 0; i < n; ++i) {
      pointers[i] = offset;
      offset += static_cast<int64_t>(s.sizes[i]) * static_cast<int64_t>(item_bytes(s.dtype));
    }
    // One sequence per document: the document index is 0, 1, ..., n.
    std::vector<int64_t> doc_idx(n + 1);
    for (uint64_t i = 0; i <= n; ++i) doc_idx[i] = static_cast<int64_t>(i);

    std::FILE* idx = std::fopen(s.idx_tmp.c_str(), "wb");
    if (!idx)
      throw Error(fmt::format("cannot create {}: {}", s.idx_tmp, errno_text()),
                  "check that the output directory is writable");
    const uint8_t code = static_cast<uint8_t>(s.dtype);
    const uint64_t doc_count = doc_idx.size();
    try {
      write_or_throw(idx, kMagic, sizeof(kMagic), s.idx_tmp);
      write_or_throw(idx, &kVersion, 8, s.idx_tmp);
      write_or_throw(idx, &code, 1, s.idx_tmp);
      write_or_throw(idx, &n, 8, s.idx_tmp);
      write_or_throw(idx, &doc_count, 8, s.idx_tmp);
      write_or_throw(idx, s.sizes.data(), n * 4, s.idx_tmp);
      write_or_throw(idx, pointers.data(), n * 8, s.idx_tmp);
      write_or_throw(idx, doc_idx.data(), doc_count * 8, s.idx_tmp);
    } catch (...) {
      std::fclose(idx);
      throw;
    }
    if (std::fclose(idx) != 0)
      throw Error(fmt::format("cannot write {}: {}", s.idx_tmp, errno_text()),
                  "check free disk space");
    // .bin first: a reader that finds the new .idx also finds the .bin it describes.
    for (const auto& [from, to] :
         {std::pair{s.bin_tmp, s.prefix + ".bin"}, std::pair{s.idx_tmp, s.prefix + ".idx"}}) {
      if (std::rename(from.c_str(), to.c_str()) != 0)
        throw Error(fmt::format("cannot rename {} to {}: {}", from, to, errno_text()),
                    "check permissions of the output directory");
    }
    s.finalized = true;
  } catch (...) {
    s.discard();
    throw;
  }
}

// ---- reader -----------------------------------------------------------------------------------

std::unique_ptr<IndexedDataset> IndexedDataset::open(const std::string& prefix) {
  const std::string idx_path = prefix + ".idx";
  const std::string bin_path = prefix + ".bin";
  auto fail = [&](const std::string& what) -> Error { return Error(what, kRebuildHint); };

  MappedFile idx(idx_path, kMissingHint);
  if (idx.size() < kHeaderBytes)
    throw fail(fmt::format("{} is truncated: {} bytes, the header alone needs {}", idx_path,
                           idx.size(), kHeaderBytes));
  const uint8_t* p = idx.data();
  if (std::memcmp(p, kMagic, sizeof(kMagic)) != 0)
    throw Error(fmt::format("{} is not a Megatron indexed dataset index (bad magic)", idx_path),
                "baton reads the MMIDIDX (\"mmap\") format; rebuild it with `baton data build`");
  p += sizeof(kMagic);
  const uint64_t version = load<uint64_t>(p);
  p += 8;
  if (version != kVersion)
    throw fail(fmt::format("{} has index format version {}; baton reads version {}", idx_path,
                           version, kVersion));
  const uint8_t code = *p++;
  const char* name = dtype_name(code);
  if (!name) throw fail(fmt::format("{} has unknown token dtype code {}", idx_path, code));
  if (code != static_cast<uint8_t>(TokenDType::U16) &&
      code != static_cast<uint8_t>(TokenDType::I32))
    throw Error(
        fmt::format("{} stores tokens as {}; baton reads uint16 and int32 token datasets", idx_path,
                    name),
        "rebuild it with `baton data build` (it picks uint16 or int32 from the vocabulary)");
  const uint64_t seq_count = load<uint64_t>(p);
  p += 8;
  const uint64_t doc_count = load<uint64_t>(p);
  p += 8;

  // Array sizes in bytes, checked against overflow before they are trusted.
  const uint64_t max_entries = idx.size() / 4;
  if (seq_count > max_entries || doc_count > max_entries)
    throw fail(
        fmt::format("{} is truncated: it claims {} sequences and {} document entries but "
                    "has only {} bytes",
                    idx_path, seq_count, doc_count, idx.size()));
  const uint64_t need = kHeaderBytes + seq_count * 4 + seq_count * 8 + doc_count * 8;
  // Megatron's multimodal datasets append one int8 mode per sequence; baton ignores them.
  if (idx.size() != need && idx.size() != need + seq_count)
    throw fail(
        fmt::format("{} has {} bytes but its header ({} sequences, {} document entries) "
                    "implies {}: it is truncated or damaged",
                    idx_path, idx.size(), seq_count, doc_count, need));
  const uint8_t* sizes_p = p;
  const uint8_t* pointers_p = sizes_p + seq_count * 4;
  const uint8_t* docs_p = pointers_p + seq_count * 8;

  std::unique_ptr<IndexedDataset> ds(new IndexedDataset());
  ds->prefix_ = prefix;
  ds->dtype_ = static_cast<TokenDType>(code);
  const int64_t item = static_cast<int64_t>(item_bytes(ds->dtype_));
  ds->sizes_.resize(seq_count);
  ds->token_offsets_.resize(seq_count + 1);
  int64_t tokens = 0;
  for (uint64_t i = 0; i < seq_count; ++i) {
    const int32_t size = load<int32_t>(sizes_p + 4 * i);
    const int64_t pointer = load<int64_t>(pointers_p + 8 * i);
    if (size < 0)
      throw fail(fmt::format("{}: sequence {} has negative length {}", idx_path, i, size));
    // Back to back from byte 0 lets the loader treat the .bin as one token stream.
    if (pointer != tokens * item)
      throw fail(
          fmt::format("{}: sequence {} starts at byte {} of {}, expected {} (sequences "
                      "must be stored back to back)",
                      idx_path, i, pointer, bin_path, tokens * item));
    ds->sizes_[i] = size;
    ds->token_offsets_[i] = tokens;
    tokens += size;
  }
  ds->token_offsets_[seq_count] = tokens;
  ds->num_tokens_ = tokens;

  int64_t prev = 0;
  for (uint64_t i = 0; i < doc_count; ++i) {
    const int64_t d = load<int64_t>(docs_p + 8 * i);
    if (d < prev || d > static_cast<int64_t>(seq_count) || (i == 0 && d != 0))
      throw fail(
          fmt::format("{}: document index entry {} is {} (entries must start at 0, never "
                      "decrease and not exceed the {} sequences)",
                      idx_path, i, d, seq_count));
    prev = d;
  }

  MappedFile bin(bin_path, kMissingHint);
  if (bin.size() != static_cast<uint64_t>(tokens * item))
    throw fail(fmt::format("{} has {} bytes but {} describes {} tokens ({} bytes)", bin_path,
                           bin.size(), idx_path, tokens, tokens * item));
  ds->bin_bytes_ = bin.size();
  ds->bin_ = bin.release();
  return ds;
}

IndexedDataset::~IndexedDataset() {
  if (bin_) ::munmap(const_cast<uint8_t*>(bin_), bin_bytes_);
}

std::vector<int32_t> IndexedDataset::sequence(int64_t i) const {
  BATON_ASSERT(i >= 0 && i < num_sequences(), "sequence {} out of range [0, {})", i,
               num_sequences());
  std::vector<int32_t> out(sizes_[i]);
  read_tokens(token_offsets_[i], sizes_[i], out.data());
  return out;
}

void IndexedDataset::read_tokens(int64_t pos, int64_t count, int32_t* out) const {
  BATON_ASSERT(pos >= 0 && count >= 0 && pos + count <= num_tokens_,
               "token range [{}, {}) outside the dataset's {} tokens", pos, pos + count,
               num_tokens_);
  if (dtype_ == TokenDType::U16) {
    const uint16_t* src = reinterpret_cast<const uint16_t*>(bin_) + pos;
    for (int64_t i = 0; i < count; ++i) out[i] = src[i];
  } else if (count > 0) {
    std::memcpy(out, reinterpret_cast<const int32_t*>(bin_) + pos, count * sizeof(int32_t));
  }
}

int32_t IndexedDataset::max_token_id() const {
  int32_t cached = max_token_.load(std::memory_order_relaxed);
  if (cached != kMaxUnknown) return cached;
  int32_t best = -1;
  const int64_t n = num_tokens_;
  if (dtype_ == TokenDType::U16) {
    const uint16_t* t = reinterpret_cast<const uint16_t*>(bin_);
#pragma omp parallel for reduction(max : best) schedule(static)
    for (int64_t i = 0; i < n; ++i) best = std::max<int32_t>(best, t[i]);
  } else {
    const int32_t* t = reinterpret_cast<const int32_t*>(bin_);
#pragma omp parallel for reduction(max : best) schedule(static)
    for (int64_t i = 0; i < n; ++i) best = std::max(best, t[i]);
  }
  // Concurrent first callers compute the same value; storing it twice is harmless.
  max_token_.store(best, std::memory_order_relaxed);
  return best;
}

}  // namespace baton
