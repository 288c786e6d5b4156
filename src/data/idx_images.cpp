// IDX reader (format in idx_images.h): maps the file (or the cached decompression of a gzip file),
// checks magic and size against the header, and hands out pointers into the mapping.
#include "data/idx_images.h"

#include <algorithm>
#include <limits>
#include <optional>

#include "core/error.h"
#include "data/gunzip_cache.h"

namespace baton {
namespace {

enum class IdxKind { IMAGES, LABELS };

constexpr uint32_t kLabelsMagic = 0x00000801;    // uint8, 1 dimension
constexpr uint32_t kImagesMagic = 0x00000803;    // uint8, 3 dimensions: N×H×W
constexpr uint32_t kChannelsMagic = 0x00000804;  // uint8, 4 dimensions: N×H×W×C
constexpr const char* kDamagedHint =
    "the file is incomplete or damaged: download it again (or reinstall its package, e.g. "
    "dataset-fashion-mnist)";

uint32_t big_endian_u32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

bool accepted(IdxKind kind, uint32_t magic) {
  return kind == IdxKind::LABELS ? magic == kLabelsMagic
                                 : magic == kImagesMagic || magic == kChannelsMagic;
}

struct IdxHeader {
  std::vector<int64_t> dims;
  size_t header_bytes = 0;
  uint64_t element_bytes = 0;  // product of dims, saturated at the uint64 maximum
};

// The dimensions of the IDX data in `m` (the magic's low byte says how many); nullopt when the file
// is too short to hold them.
std::optional<IdxHeader> read_header(const MappedFile& m) {
  if (m.size() < 4) return std::nullopt;
  IdxHeader h;
  const int ndims = m.data()[3];
  h.header_bytes = 4 + 4 * static_cast<size_t>(ndims);
  if (m.size() < h.header_bytes) return std::nullopt;
  h.element_bytes = 1;
  for (int d = 0; d < ndims; ++d) {
    const uint64_t dim = big_endian_u32(m.data() + 4 + 4 * d);
    h.dims.push_back(static_cast<int64_t>(dim));
    const uint64_t limit = std::numeric_limits<uint64_t>::max();
    h.element_bytes = dim != 0 && h.element_bytes > limit / dim ? limit : h.element_bytes * dim;
  }
  return h;
}

// A cached decompression is usable when it holds exactly what its header promises.
bool holds_what_its_header_says(const MappedFile& m) {
  const std::optional<IdxHeader> h = read_header(m);
  return h && h->element_bytes <= m.size() && m.size() - h->element_bytes == h->header_bytes;
}

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string s;
  for (size_t d = 0; d < dims.size(); ++d) s += (d ? "×" : "") + std::to_string(dims[d]);
  return s;
}

const char* missing_hint(IdxKind kind) {
  return kind == IdxKind::IMAGES
             ? "data.train / data.valid name IDX image files, e.g. "
               "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz (Debian package "
               "dataset-fashion-mnist)"
             : "data.train_labels / data.valid_labels name IDX label files, e.g. "
               "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz (Debian package "
               "dataset-fashion-mnist)";
}

Error bad_magic(IdxKind kind, const std::string& path, uint32_t magic) {
  return kind == IdxKind::IMAGES
             ? Error(fmt::format("{} is not an IDX image file: magic 0x{:08x}, expected 0x{:08x} "
                                 "(N×H×W) or 0x{:08x} (N×H×W×C)",
                                 path, magic, kImagesMagic, kChannelsMagic),
                     "data.train / data.valid name the images (e.g. train-images-idx3-ubyte.gz), "
                     "data.train_labels / data.valid_labels their labels")
             : Error(fmt::format("{} is not an IDX label file: magic 0x{:08x}, expected 0x{:08x}",
                                 path, magic, kLabelsMagic),
                     "data.train_labels / data.valid_labels name the labels (e.g. "
                     "train-labels-idx1-ubyte.gz), data.train / data.valid the images");
}

// The file's IDX bytes: the file itself, or the decompressed copy of a gzip file.
MappedFile map_idx_bytes(const std::string& path, IdxKind kind) {
  MappedFile file(path, missing_hint(kind));
  if (!is_gzip(file)) return file;
  return map_gunzipped(file, path, holds_what_its_header_says);
}

IdxFile open_idx(const std::string& path, IdxKind kind) {
  MappedFile m = map_idx_bytes(path, kind);
  if (m.size() < 4)
    throw Error(
        fmt::format("{} is truncated: {} bytes, too short for an IDX header", path, m.size()),
        kDamagedHint);
  const uint32_t magic = big_endian_u32(m.data());
  if (!accepted(kind, magic)) throw bad_magic(kind, path, magic);
  const std::optional<IdxHeader> h = read_header(m);
  if (!h)
    throw Error(fmt::format("{} is truncated: {} bytes, its IDX header alone needs {}", path,
                            m.size(), 4 + 4 * (magic & 0xff)),
                kDamagedHint);
  if (!holds_what_its_header_says(m)) {
    const bool shorter = h->element_bytes > m.size() - h->header_bytes;
    const uint64_t limit = std::numeric_limits<uint64_t>::max();
    const std::string implied = h->element_bytes > limit - h->header_bytes
                                    ? std::string("more than 2^64")  // read_header saturated
                                    : std::to_string(h->header_bytes + h->element_bytes);
    throw Error(fmt::format("{} has {} bytes but its header (dimensions {}) implies {}: {}", path,
                            m.size(), dims_text(h->dims), implied,
                            shorter ? "it is truncated" : "it has extra bytes, so it is damaged"),
                kDamagedHint);
  }
  IdxFile f;
  f.path = path;
  f.dims = h->dims;
  f.elements = m.data() + h->header_bytes;
  f.mapping = std::move(m);
  return f;
}

}  // namespace

IdxImages IdxImages::open(const std::string& path) {
  IdxImages images;
  images.file_ = open_idx(path, IdxKind::IMAGES);
  return images;
}

size_t IdxImages::image_bytes() const {
  return static_cast<size_t>(height()) * static_cast<size_t>(width()) *
         static_cast<size_t>(channels());
}

const uint8_t* IdxImages::image(int64_t i) const {
  BATON_ASSERT(i >= 0 && i < count(), "image {} outside [0, {})", i, count());
  return file_.elements + static_cast<size_t>(i) * image_bytes();
}

IdxLabels IdxLabels::open(const std::string& path) {
  IdxLabels labels;
  labels.file_ = open_idx(path, IdxKind::LABELS);
  const uint8_t* l = labels.file_.elements;
  if (labels.count() > 0) labels.max_label_ = *std::max_element(l, l + labels.count());
  return labels;
}

}  // namespace baton
