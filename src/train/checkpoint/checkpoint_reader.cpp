// CheckpointReader: opens a checkpoint file, indexes its tensors and reads boxes (see checkpoint.h).
#include <algorithm>
#include <filesystem>
#include <map>

#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/checkpoint_attrs.h"
#include "train/checkpoint/checkpoint_checksum.h"
#include "train/checkpoint/checkpoint_h5.h"

namespace baton {
namespace {

using h5::Handle;

constexpr const char* kDamagedHint =
    "the file is damaged or incomplete; resume from another checkpoint (`baton ckpt verify PATH` checks one)";

std::string dtype_name(hid_t type) {
  const size_t bytes = H5Tget_size(type);
  switch (H5Tget_class(type)) {
    case H5T_FLOAT: return fmt::format("float{}", 8 * bytes);
    case H5T_INTEGER:
      return fmt::format("{}int{}", H5Tget_sign(type) == H5T_SGN_NONE ? "u" : "", 8 * bytes);
    default: return "other";
  }
}

struct IndexCtx {
  std::vector<TensorInfo>* out;
  std::string missing_checksum;  // a dataset without its checksum (no exceptions through HDF5's C frames)
};

herr_t index_link(hid_t group, const char* name, const H5L_info_t*, void* data) {
  auto& ctx = *static_cast<IndexCtx*>(data);
  Handle obj(H5Oopen(group, name, H5P_DEFAULT));
  if (!obj.valid() || H5Iget_type(obj.get()) != H5I_DATASET) return 0;
  TensorInfo t;
  t.name = name;
  Handle space(H5Dget_space(obj.get()));
  const int nd = H5Sget_simple_extent_ndims(space.get());
  std::vector<hsize_t> dims(std::max(nd, 0));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  t.shape.assign(dims.begin(), dims.end());
  Handle type(H5Dget_type(obj.get()));
  t.dtype = dtype_name(type.get());
  if (!h5::read_attr(obj.get(), kChecksumAttr, t.checksum)) {
    ctx.missing_checksum = name;
    return 1;  // stops the visit
  }
  ctx.out->push_back(std::move(t));
  return 0;
}

void read_box(hid_t file, const TensorShard& s, const std::string& path) {
  if (s.numel() == 0) return;
  Handle ds(H5Dopen2(file, s.name.c_str(), H5P_DEFAULT));
  const h5::BoxSpaces box = h5::box_spaces(ds.get(), s.offset, s.extent);
  if (H5Dread(ds.get(), H5T_NATIVE_FLOAT, box.memory.get(), box.file.get(), H5P_DEFAULT, s.host_data) < 0)
    throw CheckpointDamaged(fmt::format("cannot read tensor '{}' from checkpoint '{}': {}", s.name,
                                        path, h5::last_error()), kDamagedHint);
}

CheckpointDamaged checksum_error(const std::string& path, const std::string& tensor, uint64_t stored,
                                 uint64_t computed) {
  return CheckpointDamaged(
      fmt::format("checksum mismatch in tensor '{}' of checkpoint '{}' (stored {}, computed {})",
                  tensor, path, checksum_hex(stored), checksum_hex(computed)),
      kDamagedHint);
}

}  // namespace

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_string(std::span<const int64_t> shape) {
  std::string r = "[";
  for (size_t i = 0; i < shape.size(); ++i) r += (i ? ", " : "") + std::to_string(shape[i]);
  return r + "]";
}

CheckpointReader::CheckpointReader(const std::string& path) : path_(path) {
  h5::init();
  BATON_REQUIRE(std::filesystem::is_regular_file(path),
                fmt::format("checkpoint '{}' does not exist or is not a file", path),
                "point at a step-NNNNNNN.h5 file or a checkpoint directory");
  Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!file.valid()) {
    const std::string why = h5::last_error();
    throw CheckpointDamaged(fmt::format("cannot open checkpoint '{}': {}", path,
                                        why.empty() ? "not a readable HDF5 file" : why),
                            kDamagedHint);
  }
  meta_ = read_meta_attrs(file.get(), path);
  IndexCtx ctx{&tensors_, {}};
  if (H5Lvisit(file.get(), H5_INDEX_NAME, H5_ITER_INC, index_link, &ctx) < 0)
    throw CheckpointDamaged(fmt::format("cannot list the tensors of checkpoint '{}': {}", path,
                                        h5::last_error()), kDamagedHint);
  if (!ctx.missing_checksum.empty())
    throw CheckpointDamaged(fmt::format("tensor '{}' in checkpoint '{}' has no checksum attribute",
                                        ctx.missing_checksum, path), kDamagedHint);
  std::sort(tensors_.begin(), tensors_.end(),
            [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
  file_id_ = file.release();
}

CheckpointReader::~CheckpointReader() { Handle close(file_id_); }

const TensorInfo* CheckpointReader::find(const std::string& name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const TensorInfo& t, const std::string& n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

uint64_t CheckpointReader::file_bytes() const { return std::filesystem::file_size(path_); }

void CheckpointReader::read(std::span<const TensorShard> shards) {
  // Check every request against the index before reading anything.
  for (const TensorShard& s : shards) {
    const TensorInfo* t = find(s.name);
    BATON_REQUIRE(t, fmt::format("checkpoint '{}' has no tensor '{}'", path_, s.name),
                  "it was written for a different model (compare `baton ckpt inspect` with the config)");
    BATON_REQUIRE(t->shape == s.full_shape,
                  fmt::format("tensor '{}' in checkpoint '{}' has shape {}, the model expects {}",
                              s.name, path_, shape_string(t->shape), shape_string(s.full_shape)),
                  "the checkpoint was written for a different model shape; use a matching config "
                  "or checkpoint.resume = \"never\" with a new checkpoint.dir");
    BATON_REQUIRE(t->dtype == "float32",
                  fmt::format("tensor '{}' in checkpoint '{}' is {}, expected float32", s.name,
                              path_, t->dtype),
                  "the file was not written by baton");
  }
  struct Partial {
    uint64_t sum = 0;
    int64_t elements = 0;
  };
  std::map<std::string, Partial> partial;
  for (const TensorShard& s : shards) {
    read_box(file_id_, s, path_);
    Partial& p = partial[s.name];
    p.sum += checksum_box(s.host_data, s.full_shape, s.offset, s.extent);
    p.elements += s.numel();
  }
  // A tensor read whole (in one box or several) is verified here; a tensor of which this process
  // reads only a part cannot be, without the other ranks' partial sums (docs/checkpoints.md).
  for (const auto& [name, p] : partial) {
    const TensorInfo& t = *find(name);
    if (p.elements == t.numel() && p.sum != t.checksum) throw checksum_error(path_, name, t.checksum, p.sum);
  }
}

std::vector<CheckpointReader::Mismatch> CheckpointReader::verify_all() {
  constexpr int64_t kSlabElements = int64_t(1) << 24;  // 64 MiB of floats at a time
  std::vector<Mismatch> bad;
  std::vector<float> buf;
  for (const TensorInfo& t : tensors_) {
    BATON_REQUIRE(!t.shape.empty() && t.dtype == "float32",
                  fmt::format("tensor '{}' in checkpoint '{}' is {} {}, expected a float32 array",
                              t.name, path_, t.dtype, shape_string(t.shape)),
                  "the file was not written by baton");
    // Slabs of whole rows along dimension 0.
    const int64_t row = t.numel() / std::max<int64_t>(t.shape[0], 1);
    const int64_t rows_per_slab = std::max<int64_t>(1, kSlabElements / std::max<int64_t>(row, 1));
    uint64_t sum = 0;
    for (int64_t r0 = 0; r0 < t.shape[0]; r0 += rows_per_slab) {
      TensorShard s{t.name, t.shape, std::vector<int64_t>(t.shape.size(), 0), t.shape, nullptr};
      s.offset[0] = r0;
      s.extent[0] = std::min(rows_per_slab, t.shape[0] - r0);
      buf.resize(static_cast<size_t>(s.numel()));
      s.host_data = buf.data();
      read_box(file_id_, s, path_);  // not read(): that would verify, and this is a slab
      sum += checksum_box(s.host_data, s.full_shape, s.offset, s.extent);
    }
    if (sum != t.checksum) bad.push_back({t.name, t.checksum, sum});
  }
  return bad;
}

}  // namespace baton
