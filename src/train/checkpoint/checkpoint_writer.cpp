// write_checkpoint_file(): one checkpoint file from this rank's shards (see checkpoint.h).
#include <fcntl.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
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
static_assert(std::endian::native == std::endian::little, "checkpoint data is written as little-endian float32");

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

constexpr const char* kDiskHint =
    "check free disk space and the health of checkpoint.dir's file system; the previous checkpoints are intact "
    "and checkpoint.resume = \"auto\" continues from the newest";

// The shown name of a checkpoint being written (without .tmp).
std::string shown_name(const std::string& path) {
  return path.ends_with(".tmp") ? path.substr(0, path.size() - 4) : path;
}

// Rank 0's part: the file's structure through serial HDF5 — attributes, every dataset with its
// checksum attribute and its data space allocated (contiguous, unwritten) — and the file offset of
// each dataset's data, in manifest order. The data space is then reserved on disk (fallocate) so a
// disk that fills while the ranks write cannot fail the save half-way. Returns "" or the problem.
std::string create_layout(const std::string& path, const CheckpointMeta& meta, const Manifest& manifest,
                          std::span<const uint64_t> sums, std::vector<uint64_t>& offsets) {
  try {
    Handle file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
    if (!file.valid()) return fmt::format("cannot create checkpoint file '{}': {}", path, h5::last_error());
    write_meta_attrs(file.get(), meta);
    Handle lcpl(H5Pcreate(H5P_LINK_CREATE));
    H5Pset_create_intermediate_group(lcpl.get(), 1);
    // Contiguous storage: plain C-order bytes at one offset, allocated now (the offset is known
    // before any data is written), no fill-value pass since every element is written.
    Handle dcpl(H5Pcreate(H5P_DATASET_CREATE));
    H5Pset_layout(dcpl.get(), H5D_CONTIGUOUS);
    H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY);
    H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER);
    size_t i = 0;
    for (const auto& [name, shape] : manifest) {
      const auto dims = to_hsize(shape);
      Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
      Handle ds(H5Dcreate2(file.get(), name.c_str(), H5T_IEEE_F32LE, space.get(), lcpl.get(), dcpl.get(),
                           H5P_DEFAULT));
      if (!ds.valid()) return fmt::format("cannot create dataset '{}' in '{}': {}", name, path, h5::last_error());
      h5::write_attr(ds.get(), kChecksumAttr, sums[i]);
      offsets[i++] = H5Dget_offset(ds.get());  // HADDR_UNDEF for an empty dataset
    }
    // Reserve every byte the file will hold before HDF5 writes its metadata and the ranks their data.
    const hsize_t size = [&] {
      hsize_t n = 0;
      H5Fget_filesize(file.get(), &n);
      return n;
    }();
    const int fd = ::open(path.c_str(), O_WRONLY);
    if (fd < 0) return fmt::format("cannot open '{}' to reserve its space: {}", path, std::strerror(errno));
    const int rc = size > 0 ? ::fallocate(fd, 0, 0, static_cast<off_t>(size)) : 0;
    const int err = errno;
    ::close(fd);
    // File systems without fallocate (some NFS, FUSE) just write: a failure then is found by the ranks.
    if (rc != 0 && err != EOPNOTSUPP && err != ENOSYS)
      return fmt::format("cannot reserve {:.1f} MB for checkpoint '{}': {}", double(size) / 1e6, shown_name(path),
                         std::strerror(err));
    if (!file.reset()) return fmt::format("failed writing checkpoint '{}': {}", path, h5::last_error());
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

// write() until done; "" or the system's message.
std::string pwrite_all(int fd, const float* data, int64_t count, uint64_t at) {
  const char* p = reinterpret_cast<const char*>(data);
  size_t left = static_cast<size_t>(count) * sizeof(float);
  while (left > 0) {
    const ssize_t n = ::pwrite(fd, p, left, static_cast<off_t>(at));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? std::strerror(errno) : "the write made no progress";
    p += n;
    at += static_cast<uint64_t>(n);
    left -= static_cast<size_t>(n);
  }
  return "";
}

// This rank's box of a C-order dataset whose data starts at file offset `base`: the box is cut into
// runs that are contiguous in the file (the trailing dimensions it spans whole, and its extent along
// the next one), one pwrite each. The box's data is packed in C order of its extent.
std::string write_box(int fd, uint64_t base, const TensorShard& s) {
  if (s.numel() == 0) return "";
  const size_t nd = s.full_shape.size();
  if (nd == 0) return pwrite_all(fd, s.host_data, 1, base);
  size_t k = nd - 1;  // runs span dims k.. of the box; the dims before k are iterated
  while (k > 0 && s.extent[k] == s.full_shape[k]) --k;
  std::vector<int64_t> stride(nd, 1);
  for (size_t d = nd - 1; d > 0; --d) stride[d - 1] = stride[d] * s.full_shape[d];
  const int64_t run = s.extent[k] * stride[k];
  std::vector<int64_t> idx(k, 0);
  const float* src = s.host_data;
  for (;;) {
    int64_t at = s.offset[k] * stride[k];
    for (size_t d = 0; d < k; ++d) at += (s.offset[d] + idx[d]) * stride[d];
    if (std::string e = pwrite_all(fd, src, run, base + static_cast<uint64_t>(at) * sizeof(float)); !e.empty())
      return fmt::format("writing tensor '{}': {}", s.name, e);
    src += run;
    size_t d = k;
    while (d > 0 && ++idx[d - 1] == s.extent[d - 1]) idx[--d] = 0;
    if (d == 0) return "";
  }
}

// Every rank's part: its boxes at the offsets rank 0 allocated, then fdatasync (on a shared file
// system each client flushes its own writes) and close (NFS reports write errors there).
std::string write_data(const std::string& path, const Manifest& manifest,
                       const std::map<std::string, std::vector<const TensorShard*>>& by_name,
                       std::span<const uint64_t> offsets, int64_t step) {
  const int fd = ::open(path.c_str(), O_WRONLY);
  if (fd < 0) return fmt::format("cannot open checkpoint file '{}': {}", path, std::strerror(errno));
  std::string problem;
  size_t i = 0;
  for (const auto& [name, shape] : manifest) {
    if (const auto it = by_name.find(name); it != by_name.end())
      for (const TensorShard* s : it->second)
        if (problem.empty()) problem = write_box(fd, offsets[i], *s);
    if (++i == manifest.size() / 2) fault_point("mid_write", step);
  }
  if (problem.empty() && ::fdatasync(fd) != 0) problem = fmt::format("fdatasync: {}", std::strerror(errno));
  if (::close(fd) != 0 && problem.empty()) problem = fmt::format("close: {}", std::strerror(errno));
  return problem.empty() ? "" : fmt::format("checkpoint '{}' not written: {}", shown_name(path), problem);
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
  throw AgreedError(fmt::format("no room for checkpoint '{}': {:.1f} MB free in {}, it needs {:.1f} MB", shown_name(path),
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

  // Rank 0 lays the file out; the ranks learn the outcome and the offsets before writing into it.
  const bool root = checkpoint_comm_rank(comm) == 0;
  std::vector<uint64_t> offsets(manifest.size(), 0);
  checkpoint_agree(comm, root ? create_layout(path, meta, manifest, sums, offsets) : "", kDiskHint);
  if (nranks > 1)
    MPI_Bcast(offsets.data(), static_cast<int>(offsets.size()), MPI_UINT64_T, 0, comm);
  fault_point("after_create", meta.step);
  // Every rank writes its boxes with plain pwrite: an I/O error is one rank's finding, agreed on
  // below by a plain collective, never a rank left in a collective inside HDF5 or MPI-IO (a disk
  // filling mid-save crashed one rank at exit and hung two).
  checkpoint_agree(comm, write_data(path, manifest, by_name, offsets, meta.step), kDiskHint);
}

}  // namespace baton
