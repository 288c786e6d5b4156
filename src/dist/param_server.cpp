// The WSP parameter server on passive-target one-sided MPI (see param_server.h for the protocol).
#include "dist/param_server.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <exception>
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

ParamServer::ParamServer(MPI_Comm comm, std::vector<TensorSpan> tensors, int num_vw, int staleness)
    : comm_(comm), num_vw_(num_vw), slots_(staleness + 1), tensors_(std::move(tensors)) {
  BATON_ASSERT(num_vw >= 1 && staleness >= 0, "parameter server: {} virtual workers, D = {}", num_vw, staleness);
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
  fold_.resize(*std::max_element(shard_floats_.begin(), shard_floats_.end()));
  // Counters, w_global, then D + 1 wave slots (MPI_Win_allocate zero-fills nothing: init() does).
  const MPI_Aint bytes = slot_disp(rank_, slots_);
  BlockedTimer blocked;
  check_mpi(MPI_Win_allocate(bytes, 1, MPI_INFO_NULL, comm_, &base_, &win_), "MPI_Win_allocate (parameter server)");
  check_mpi(MPI_Win_set_errhandler(win_, MPI_ERRORS_RETURN), "MPI_Win_set_errhandler");
}

ParamServer::~ParamServer() {
  // MPI_Win_free is collective: while an exception unwinds (run_guarded then aborts the job with
  // its message) the other ranks are not freeing theirs, and waiting for them would hang the job
  // with the message unprinted. Leave the window to the abort then.
  if (win_ != MPI_WIN_NULL && std::uncaught_exceptions() == 0) MPI_Win_free(&win_);  // no check: must not throw
}

void ParamServer::init(const float* flat) {
  // Local stores into the own window need an exclusive epoch on itself (MPI's separate memory model).
  check_mpi(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank_, 0, win_), "MPI_Win_lock (parameter server init)");
  std::memset(base_, 0, slot_disp(rank_, slots_));
  float* data = reinterpret_cast<float*>(static_cast<char*>(base_) + data_disp());
  for (size_t i = 0; i < tensors_.size(); ++i)
    if (shard_of(static_cast<int>(i)) == rank_)
      std::memcpy(data + shard_offset_[i], flat + tensors_[i].offset, tensors_[i].count * sizeof(float));
  check_mpi(MPI_Win_unlock(rank_, win_), "MPI_Win_unlock (parameter server init)");
  BlockedTimer blocked;
  check_mpi(MPI_Barrier(comm_), "MPI_Barrier (parameter server init)");  // nobody pushes into an unset shard
}

void ParamServer::push(int vw, int64_t wave, const float* delta) {
  BATON_ASSERT(vw >= 0 && vw < num_vw_, "parameter server: push from VW {} of {}", vw, num_vw_);
  for (size_t i = 0; i < tensors_.size(); ++i)
    std::memcpy(staging_[shard_of(static_cast<int>(i))].data() + shard_offset_[i], delta + tensors_[i].offset,
                tensors_[i].count * sizeof(float));
  const int64_t one = 1;
  std::vector<int64_t> counters(num_vw_);
  BlockedTimer blocked;
  // Shards in a fixed order; each shard's slot, counter and fold change inside one exclusive epoch.
  for (int s = 0; s < size_; ++s) {
    const size_t n = shard_floats_[s];
    const MPI_Aint slot = slot_disp(s, static_cast<int>(wave % slots_));
    check_mpi(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, s, 0, win_), "MPI_Win_lock (parameter server push)");
    accumulate_floats(staging_[s].data(), n, s, slot, win_);
    check_mpi(MPI_Accumulate(&one, 1, MPI_INT64_T, s, MPI_Aint(vw * sizeof(int64_t)), 1, MPI_INT64_T, MPI_SUM, win_),
              "MPI_Accumulate (parameter server counter)");
    check_mpi(MPI_Get_accumulate(nullptr, 0, MPI_INT64_T, counters.data(), num_vw_, MPI_INT64_T, s, 0, num_vw_,
                                 MPI_INT64_T, MPI_NO_OP, win_),
              "MPI_Get_accumulate (parameter server counters)");
    check_mpi(MPI_Win_flush(s, win_), "MPI_Win_flush (parameter server push)");
    BATON_ASSERT(counters[vw] == wave + 1, "parameter server: VW {} pushed wave {} after {} waves", vw, wave,
                 counters[vw] - 1);
    counters[vw] -= 1;  // c_global before this push: the slot is free only within D waves of it
    const int64_t before = *std::min_element(counters.begin(), counters.end());
    counters[vw] += 1;
    BATON_ASSERT(wave - before < slots_, "parameter server: VW {} pushed wave {} with c_global {}, beyond D = {}", vw,
                 wave, before, slots_ - 1);
    // The last VW to push this wave moves its slot into w_global: w_global stays "as of c_global".
    if (*std::min_element(counters.begin(), counters.end()) == wave + 1) {
      get_floats(fold_.data(), n, s, slot, win_);
      check_mpi(MPI_Win_flush(s, win_), "MPI_Win_flush (parameter server fold)");
      accumulate_floats(fold_.data(), n, s, data_disp(), win_);
      std::fill(fold_.begin(), fold_.begin() + n, 0.0f);
      for (size_t done = 0; done < n; done += kMaxCount) {
        const int k = static_cast<int>(std::min(kMaxCount, n - done));
        check_mpi(MPI_Accumulate(fold_.data() + done, k, MPI_FLOAT, s, slot + MPI_Aint(done * sizeof(float)), k,
                                 MPI_FLOAT, MPI_REPLACE, win_),
                  "MPI_Accumulate (parameter server slot reset)");
      }
    }
    check_mpi(MPI_Win_unlock(s, win_), "MPI_Win_unlock (parameter server push)");
  }
}

std::vector<int64_t> ParamServer::read_shards(bool data) {
  std::vector<int64_t> c_global(size_);
  std::vector<int64_t> counters(num_vw_);
  BlockedTimer blocked;
  for (int s = 0; s < size_; ++s) {
    check_mpi(MPI_Win_lock(MPI_LOCK_SHARED, s, 0, win_), "MPI_Win_lock (parameter server pull)");
    check_mpi(MPI_Get_accumulate(nullptr, 0, MPI_INT64_T, counters.data(), num_vw_, MPI_INT64_T, s, 0, num_vw_,
                                 MPI_INT64_T, MPI_NO_OP, win_),
              "MPI_Get_accumulate (parameter server counters)");
    if (data) get_floats(staging_[s].data(), shard_floats_[s], s, data_disp(), win_);
    check_mpi(MPI_Win_unlock(s, win_), "MPI_Win_unlock (parameter server pull)");
    c_global[s] = *std::min_element(counters.begin(), counters.end());
  }
  return c_global;
}

std::optional<int64_t> ParamServer::try_pull(int64_t needs, float* out) {
  // Counters first (cheap): no data moves for a pull that must wait.
  for (int64_t c : read_shards(false))
    if (c < needs) return std::nullopt;
  for (int attempt = 0;; ++attempt) {
    const std::vector<int64_t> c = read_shards(true);
    if (std::all_of(c.begin(), c.end(), [&](int64_t x) { return x == c[0]; })) {
      BATON_ASSERT(c[0] >= needs, "parameter server: c_global went backwards");
      for (size_t i = 0; i < tensors_.size(); ++i)
        std::memcpy(out + tensors_[i].offset, staging_[shard_of(static_cast<int>(i))].data() + shard_offset_[i],
                    tensors_[i].count * sizeof(float));
      return c[0];
    }
    // A wave was complete on some shards only while we read them: read again once it is on all.
    std::this_thread::sleep_for(std::chrono::microseconds(std::min(2000, 50 << std::min(attempt, 5))));
  }
}

int64_t ParamServer::pull(int64_t needs, float* out, double* waited_s) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int attempt = 0;; ++attempt) {
    if (const std::optional<int64_t> c = try_pull(needs, out)) {
      if (waited_s) *waited_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return *c;
    }
    // Sleep, do not spin: the other ranks of this machine need the core to reach their pushes.
    BlockedTimer blocked;
    std::this_thread::sleep_for(std::chrono::microseconds(std::min(2000, 50 << std::min(attempt, 6))));
  }
}

}  // namespace baton::dist
