// The WSP parameter server on passive-target one-sided MPI (see param_server.h for the protocol).
#include "dist/param_server.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "dist/comm.h"
#include "dist/mpi_comm.h"

namespace baton::dist {
namespace {

// MPI-3 counts are int: long shards move in pieces (still inside the caller's epoch).
constexpr size_t kMaxCount = size_t(1) << 30;

void accumulate_floats(const float* src, size_t n, int target, MPI_Aint disp, MPI_Win win) {
  for (size_t done = 0; done < n; done += kMaxCount) {
    const int k = static_cast<int>(std::min(kMaxCount, n - done));
    check_mpi(MPI_Accumulate(src + done, k, MPI_FLOAT, target, disp + MPI_Aint(done * sizeof(float)), k,
                             MPI_FLOAT, MPI_SUM, win),
              "MPI_Accumulate (parameter server push)");
  }
}

void get_floats(float* dst, size_t n, int target, MPI_Aint disp, MPI_Win win) {
  for (size_t done = 0; done < n; done += kMaxCount) {
    const int k = static_cast<int>(std::min(kMaxCount, n - done));
    check_mpi(MPI_Get(dst + done, k, MPI_FLOAT, target, disp + MPI_Aint(done * sizeof(float)), k, MPI_FLOAT, win),
              "MPI_Get (parameter server pull)");
  }
}

}  // namespace

ParamServer::ParamServer(MPI_Comm comm, std::vector<TensorSpan> tensors, int num_vw)
    : comm_(comm), num_vw_(num_vw), tensors_(std::move(tensors)) {
  BATON_ASSERT(num_vw >= 1, "parameter server: {} virtual workers", num_vw);
  check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  shard_floats_.assign(size_, 0);
  shard_offset_.resize(tensors_.size());
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const int s = shard_of(static_cast<int>(i));
    shard_offset_[i] = shard_floats_[s];
    shard_floats_[s] += tensors_[i].count;
  }
  staging_.resize(size_);
  for (int s = 0; s < size_; ++s) staging_[s].resize(shard_floats_[s]);
  const MPI_Aint bytes = data_disp() + MPI_Aint(shard_floats_[rank_] * sizeof(float));
  BlockedTimer blocked;
  check_mpi(MPI_Win_allocate(bytes, 1, MPI_INFO_NULL, comm_, &base_, &win_), "MPI_Win_allocate (parameter server)");
  check_mpi(MPI_Win_set_errhandler(win_, MPI_ERRORS_RETURN), "MPI_Win_set_errhandler");
}

ParamServer::~ParamServer() {
  if (win_ != MPI_WIN_NULL) MPI_Win_free(&win_);  // no check: destructors must not throw
}

void ParamServer::init(const float* flat) {
  // Local stores into the own window need an exclusive epoch on itself (MPI's separate memory model).
  check_mpi(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank_, 0, win_), "MPI_Win_lock (parameter server init)");
  std::memset(base_, 0, data_disp());
  float* data = reinterpret_cast<float*>(static_cast<char*>(base_) + data_disp());
  for (size_t i = 0; i < tensors_.size(); ++i)
    if (shard_of(static_cast<int>(i)) == rank_)
      std::memcpy(data + shard_offset_[i], flat + tensors_[i].offset, tensors_[i].count * sizeof(float));
  check_mpi(MPI_Win_unlock(rank_, win_), "MPI_Win_unlock (parameter server init)");
  BlockedTimer blocked;
  check_mpi(MPI_Barrier(comm_), "MPI_Barrier (parameter server init)");  // nobody pushes into an unset shard
}

void ParamServer::push(int vw, const float* delta) {
  BATON_ASSERT(vw >= 0 && vw < num_vw_, "parameter server: push from VW {} of {}", vw, num_vw_);
  for (size_t i = 0; i < tensors_.size(); ++i)
    std::memcpy(staging_[shard_of(static_cast<int>(i))].data() + shard_offset_[i], delta + tensors_[i].offset,
                tensors_[i].count * sizeof(float));
  const int64_t one = 1;
  BlockedTimer blocked;
  // Shards in a fixed order; each shard's data and counter change inside one exclusive epoch.
  for (int s = 0; s < size_; ++s) {
    check_mpi(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, s, 0, win_), "MPI_Win_lock (parameter server push)");
    accumulate_floats(staging_[s].data(), shard_floats_[s], s, data_disp(), win_);
    check_mpi(MPI_Accumulate(&one, 1, MPI_INT64_T, s, MPI_Aint(vw * sizeof(int64_t)), 1, MPI_INT64_T, MPI_SUM,
                             win_),
              "MPI_Accumulate (parameter server counter)");
    check_mpi(MPI_Win_unlock(s, win_), "MPI_Win_unlock (parameter server push)");
  }
}

std::vector<std::vector<int64_t>> ParamServer::read_shards(float* out) {
  std::vector<std::vector<int64_t>> counters(size_, std::vector<int64_t>(num_vw_));
  BlockedTimer blocked;
  for (int s = 0; s < size_; ++s) {
    check_mpi(MPI_Win_lock(MPI_LOCK_SHARED, s, 0, win_), "MPI_Win_lock (parameter server pull)");
    // MPI_Get_accumulate(NO_OP) reads atomically with respect to the pushes' accumulates.
    check_mpi(MPI_Get_accumulate(nullptr, 0, MPI_INT64_T, counters[s].data(), num_vw_, MPI_INT64_T, s, 0, num_vw_,
                                 MPI_INT64_T, MPI_NO_OP, win_),
              "MPI_Get_accumulate (parameter server counters)");
    if (out) get_floats(staging_[s].data(), shard_floats_[s], s, data_disp(), win_);
    check_mpi(MPI_Win_unlock(s, win_), "MPI_Win_unlock (parameter server pull)");
  }
  return counters;
}

std::optional<std::vector<int64_t>> ParamServer::try_pull(int64_t needs_waves, float* out) {
  const auto allows = [&](const std::vector<int64_t>& c) {
    return *std::min_element(c.begin(), c.end()) >= needs_waves;
  };
  // Counters first (cheap): no data moves for a pull that must wait.
  for (const std::vector<int64_t>& c : read_shards(nullptr))
    if (!allows(c)) return std::nullopt;
  for (int attempt = 0;; ++attempt) {
    const std::vector<std::vector<int64_t>> counters = read_shards(out);
    if (std::all_of(counters.begin(), counters.end(), [&](const auto& c) { return c == counters[0]; })) {
      BATON_ASSERT(allows(counters[0]), "parameter server: pushed-wave counters went backwards");
      for (size_t i = 0; i < tensors_.size(); ++i)
        std::memcpy(out + tensors_[i].offset, staging_[shard_of(static_cast<int>(i))].data() + shard_offset_[i],
                    tensors_[i].count * sizeof(float));
      return counters[0];
    }
    // A push was between shards while we read them: read again once it has moved on.
    std::this_thread::sleep_for(std::chrono::microseconds(std::min(2000, 50 << std::min(attempt, 5))));
  }
}

std::vector<int64_t> ParamServer::pull(int64_t needs_waves, float* out, double* waited_s) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int attempt = 0;; ++attempt) {
    if (auto c = try_pull(needs_waves, out)) {
      if (waited_s) *waited_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return *c;
    }
    // Sleep, do not spin: the other ranks of this machine need the core to reach their pushes.
    BlockedTimer blocked;
    std::this_thread::sleep_for(std::chrono::microseconds(std::min(2000, 50 << std::min(attempt, 6))));
  }
}

}  // namespace baton::dist
