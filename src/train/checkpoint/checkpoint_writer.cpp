// write_checkpoint_file(): one checkpoint file from this rank's shards (see checkpoint.h).
#include <chrono>
#include <filesystem>
#include <ctime>
#include <map>
#include <sstream>

#include "core/build_info.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/checkpoint_attrs.h"
#include "train/checkpoint/checkpoint_checksum.h"
#include "train/checkpoint/checkpoint_comm.h"
#include "train/checkpoint/checkpoint_fault.h"
#include "train/checkpoint/checkpoint_h5.h"

namespace baton {
namespace {

using h5::Handle;
using Manifest = std::map<std::string, std::vector<int64_t>>;  // dataset -> full shape, sorted

void check_shard(const TensorShard& s) {
  const size_t nd = s.full_shape.size();
  BATON_ASSERT(s.offset.size() == nd && s.extent.size() == nd,
               "shard of '{}' has {} offsets and {} extents for a {}-d tensor", s.name,
               s.offset.size(), s.extent.size(), nd);
  for (size_t d = 0; d < nd; ++d)
    BATON_ASSERT(s.offset[d] >= 0 && s.extent[d] >= 0 && s.offset[d] + s.extent[d] <= s.full_shape[d],
                 "shard of '{}' exceeds dimension {} ({} + {} > {})", s.name, d, s.offset[d],
                 s.extent[d], s.full_shape[d]);
  BATON_ASSERT(s.numel() == 0 || s.host_data, "shard of '{}' has no data", s.name);
  BATON_ASSERT(!s.name.empty() && s.name.find_first_of(" \t\n") == std::string::npos,
               "dataset name '{}' is empty or has white space", s.name);
}

std::string serialize(const Manifest& m) {
  std::string out;
  for (const auto& [name, shape] : m) {
    out += name;
    for (int64_t d : shape) out += fmt::format(" {}", d);
    out += "\n";
  }
  return out;
}

void merge(Manifest& into, const std::string& text) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string name;
    fields >> name;
    std::vector<int64_t> shape;
    for (int64_t d; fields >> d;) shape.push_back(d);
    auto [it, added] = into.emplace(name, shape);
    BATON_ASSERT(added || it->second == shape, "ranks disagree on the shape of '{}'", name);
  }
}

// The union over all ranks of (dataset, full shape): every rank must create every dataset, since
// dataset creation is collective under MPI-IO, even when it holds no part of it (pipeline stages).
Manifest gather_manifest(std::span<const TensorShard> shards, MPI_Comm comm, int nranks) {
  Manifest local;
  for (const TensorShard& s : shards) {
    auto [it, added] = local.emplace(s.name, s.full_shape);
    BATON_ASSERT(added || it->second == s.full_shape, "shards of '{}' disagree on its shape", s.name);
  }
  if (nranks == 1) return local;
  const std::string mine = serialize(local);
  std::vector<int> sizes(nranks), displs(nranks);
  int n = static_cast<int>(mine.size());
  MPI_Allgather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, comm);
  int total = 0;
  for (int r = 0; r < nranks; ++r) displs[r] = std::exchange(total, total + sizes[r]);
  std::string all(total, '\0');
  MPI_Allgatherv(mine.data(), n, MPI_CHAR, all.data(), sizes.data(), displs.data(), MPI_CHAR, comm);
  Manifest merged;
  merge(merged, all);
  return merged;
}

std::string iso8601_utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::vector<hsize_t> to_hsize(std::span<const int64_t> v) { return {v.begin(), v.end()}; }

void write_box(hid_t dataset, const TensorShard& s, const std::string& path) {
  if (s.numel() == 0) return;
  const h5::BoxSpaces box = h5::box_spaces(dataset, s.offset, s.extent);
  if (H5Dwrite(dataset, H5T_NATIVE_FLOAT, box.memory.get(), box.file.get(), H5P_DEFAULT, s.host_data) < 0)
    throw Error(fmt::format("failed writing tensor '{}' to '{}': {}", s.name, path, h5::last_error()),
                "check free disk space in checkpoint.dir");
}

// A full disk found by HDF5 mid-write ended with a multi-line HDF5 error and a crash at exit (one
// process) or a hang (several): the file's size is known before it is created, so a file system
// without room for it is one error first — the same on every rank (rank 0 looks, all agree).
void require_room(const std::string& path, const Manifest& manifest, const CheckpointMeta& meta, MPI_Comm comm,
                  int nranks) {
  double need = 65536.0 + double(meta.config_toml.size());  // metadata, B-tree nodes, attributes
  for (const auto& [name, shape] : manifest) {
    double n = 4.0;
    for (int64_t d : shape) n *= double(d);
    need += n + 256.0;  // the data, its object header and checksum attribute
  }
  double room[2] = {-1, need};  // available bytes (-1: unknown), needed bytes
  if (checkpoint_comm_rank(comm) == 0) {
    const std::filesystem::path dir = std::filesystem::path(path).parent_path();
    std::error_code ec;
    const auto space = std::filesystem::space(dir.empty() ? "." : dir, ec);
    if (!ec) room[0] = double(space.available);
  }
  if (nranks > 1) MPI_Bcast(room, 2, MPI_DOUBLE, 0, comm);
  if (room[0] < 0 || room[0] >= room[1]) return;
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  const std::string shown = path.ends_with(".tmp") ? path.substr(0, path.size() - 4) : path;
  throw AgreedError(fmt::format("no room for checkpoint '{}': {:.1f} MB free in {}, it needs {:.1f} MB", shown,
                                room[0] / 1e6, dir.string(), room[1] / 1e6),
                    "free space there (older checkpoints are intact; checkpoint.keep prunes them) or point "
                    "checkpoint.dir elsewhere; checkpoint.resume = \"auto\" continues from the newest");
}

}  // namespace

int64_t TensorShard::numel() const {
  int64_t n = 1;
  for (int64_t e : extent) n *= e;
  return n;
}

int64_t TensorShard::full_numel() const {
  int64_t n = 1;
  for (int64_t e : full_shape) n *= e;
  return n;
}

TensorShard whole_tensor(std::string name, std::vector<int64_t> shape, float* data) {
  TensorShard s{std::move(name), shape, std::vector<int64_t>(shape.size(), 0), shape, data};
  return s;
}

void write_checkpoint_file(const std::string& path, const CheckpointMeta& meta_in,
                           std::span<const TensorShard> shards, MPI_Comm comm) {
  h5::init();
  for (const TensorShard& s : shards) check_shard(s);
  const int nranks = checkpoint_comm_size(comm);
  const Manifest manifest = gather_manifest(shards, comm, nranks);

  // Checksums and coverage summed over the shards of all ranks (exact in any order).
  std::map<std::string, std::vector<const TensorShard*>> by_name;
  for (const TensorShard& s : shards) by_name[s.name].push_back(&s);
  std::vector<uint64_t> sums;
  std::vector<int64_t> covered;
  for (const auto& [name, shape] : manifest) {
    uint64_t sum = 0;
    int64_t n = 0;
    for (const TensorShard* s : by_name[name]) {
      sum += checksum_box(s->host_data, s->full_shape, s->offset, s->extent);
      n += s->numel();
    }
    sums.push_back(sum);
    covered.push_back(n);
  }
  CheckpointMeta meta = meta_in;
  meta.writer = std::string("baton ") + build::version;
  char created[32] = {};
  std::snprintf(created, sizeof created, "%s", iso8601_utc_now().c_str());
  if (nranks > 1) {
    MPI_Allreduce(MPI_IN_PLACE, sums.data(), static_cast<int>(sums.size()), MPI_UINT64_T, MPI_SUM, comm);
    MPI_Allreduce(MPI_IN_PLACE, covered.data(), static_cast<int>(covered.size()), MPI_INT64_T, MPI_SUM, comm);
    MPI_Bcast(created, sizeof created, MPI_CHAR, 0, comm);  // attributes must match on all ranks
  }
  meta.created = created;
  {
    size_t i = 0;
    for (const auto& [name, shape] : manifest) {
      int64_t numel = 1;
      for (int64_t d : shape) numel *= d;
      BATON_ASSERT(covered[i] == numel, "the shards of '{}' cover {} of its {} elements", name,
                   covered[i], numel);
      ++i;
    }
  }

  require_room(path, manifest, meta, comm, nranks);

  Handle fapl(H5Pcreate(H5P_FILE_ACCESS));
  if (nranks > 1) {
    H5Pset_fapl_mpio(fapl.get(), comm, MPI_INFO_NULL);
    H5Pset_all_coll_metadata_ops(fapl.get(), true);
    H5Pset_coll_metadata_write(fapl.get(), true);
  }
  Handle file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()));
  if (!file.valid())
    throw Error(fmt::format("cannot create checkpoint file '{}': {}", path, h5::last_error()),
                "check that checkpoint.dir is writable");
  fault_point("after_create", meta.step);
  write_meta_attrs(file.get(), meta);

  Handle lcpl(H5Pcreate(H5P_LINK_CREATE));
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  // Contiguous storage: plain C-order bytes at one offset (fast hyperslab I/O, no chunk index), and
  // no fill-value pass since every element is written.
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE));
  H5Pset_layout(dcpl.get(), H5D_CONTIGUOUS);
  H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER);
  size_t i = 0;
  for (const auto& [name, shape] : manifest) {
    const auto dims = to_hsize(shape);
    Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
    Handle ds(H5Dcreate2(file.get(), name.c_str(), H5T_IEEE_F32LE, space.get(), lcpl.get(),
                         dcpl.get(), H5P_DEFAULT));
    if (!ds.valid())
      throw Error(fmt::format("cannot create dataset '{}' in '{}': {}", name, path, h5::last_error()),
                  "check free disk space in checkpoint.dir");
    h5::write_attr(ds.get(), kChecksumAttr, sums[i]);
    for (const TensorShard* s : by_name[name]) write_box(ds.get(), *s, path);
    if (++i == manifest.size() / 2) fault_point("mid_write", meta.step);
  }
  if (H5Fflush(file.get(), H5F_SCOPE_GLOBAL) < 0 || !file.reset())
    throw Error(fmt::format("failed writing checkpoint '{}': {}", path, h5::last_error()),
                "check free disk space in checkpoint.dir");
}

}  // namespace baton
