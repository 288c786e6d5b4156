// The WSP parameter server on passive-target one-sided MPI (see param_server.h for the protocol).
#include "dist/param_server.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <exception>
#include <string>

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

ParamServer::ParamServer(MPI_Comm comm, std::vector<TensorSpan> tensors, int num_vw, int staleness,
                         std::vector<int> placement)
    : comm_(comm), num_vw_(num_vw), slots_(staleness + 1), tensors_(std::move(tensors)), shard_of_(std::move(placement)) {
  BATON_ASSERT(num_vw >= 1 && staleness >= 0, "parameter server: {} virtual workers, D = {}", num_vw, staleness);
  check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  if (shard_of_.empty())
    for (size_t i = 0; i < tensors_.size(); ++i) shard_of_.push_back(static_cast<int>(i) % size_);
  BATON_ASSERT(shard_of_.size() == tensors_.size(), "parameter server: {} placements for {} tensors",
               shard_of_.size(), tensors_.size());
  shard_floats_.assign(size_, 0);
  shard_tensors_.assign(size_, 0);
  shard_offset_.resize(tensors_.size());
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const int s = shard_of(static_cast<int>(i));
    BATON_ASSERT(s >= 0 && s < size_, "parameter server: tensor {} placed on shard {} of {}", i, s, size_);
    shard_offset_[i] = shard_floats_[s];
    shard_floats_[s] += tensors_[i].count;
    shard_tensors_[s] += 1;
  }
  std::vector<int> every(tensors_.size());
  for (size_t i = 0; i < every.size(); ++i) every[i] = static_cast<int>(i);
  all_ = select(every);
  staging_.resize(size_);
  for (int s = 0; s < size_; ++s) staging_[s].resize(shard_floats_[s]);
  fold_.resize(*std::max_element(shard_floats_.begin(), shard_floats_.end()));
  traffic_.push.assign(static_cast<size_t>(size_), 0);
  traffic_.pull.assign(static_cast<size_t>(size_), 0);
  // Counters, w_global, then D + 1 wave slots (MPI_Win_allocate zero-fills nothing: init() does).
  const MPI_Aint bytes = slot_disp(rank_, slots_);
  BlockedTimer blocked;
  check_mpi(MPI_Win_allocate(bytes, 1, MPI_INFO_NULL, comm_, &base_, &win_), "MPI_Win_allocate (parameter server)");
  check_mpi(MPI_Win_set_errhandler(win_, MPI_ERRORS_RETURN), "MPI_Win_set_errhandler");
}

ParamServer::Selection ParamServer::select(const std::vector<int>& tensors) const {
  Selection sel;
  sel.runs.resize(size_);
  sel.tensors.assign(size_, 0);
  std::vector<std::vector<int>> by_shard(size_);
  for (int i : tensors) {
    BATON_ASSERT(i >= 0 && static_cast<size_t>(i) < tensors_.size(), "parameter server: tensor {} of {}", i,
                 tensors_.size());
    by_shard[shard_of(i)].push_back(i);
  }
  for (int s = 0; s < size_; ++s) {
    std::vector<int>& list = by_shard[s];
    std::sort(list.begin(), list.end(), [&](int a, int b) { return shard_offset_[a] < shard_offset_[b]; });
    BATON_ASSERT(std::adjacent_find(list.begin(), list.end()) == list.end(), "parameter server: a tensor selected twice");
    sel.tensors[s] = static_cast<int64_t>(list.size());
    for (int i : list) {
      std::vector<Selection::Run>& runs = sel.runs[s];
      if (runs.empty() || runs.back().shard_offset + runs.back().count != shard_offset_[i])
        runs.push_back({shard_offset_[i], 0, {}});
      runs.back().count += tensors_[i].count;
      runs.back().tensors.push_back(i);
    }
  }
  return sel;
}

ParamServer::~ParamServer() {
  // MPI_Win_free is collective: while an error unwinds this rank alone, the other ranks are not
  // there to join it and it would hang instead of letting the error end the job (dist/guard.h).
  if (std::uncaught_exceptions() > 0) return;
  if (win_ != MPI_WIN_NULL) MPI_Win_free(&win_);  // no check: destructors must not throw
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

// c_global on a shard: the waves every VW has pushed all of the shard's n tensors of.
static int64_t complete_waves(const std::vector<int64_t>& counters, int64_t n) {
  return *std::min_element(counters.begin(), counters.end()) / n;
}

void ParamServer::push(int vw, int64_t wave, const float* delta, const Selection& sel) {
  BATON_ASSERT(vw >= 0 && vw < num_vw_, "parameter server: push from VW {} of {}", vw, num_vw_);
  for (int s = 0; s < size_; ++s)
    for (const Selection::Run& run : sel.runs[s])
      for (int i : run.tensors)
        std::memcpy(staging_[s].data() + shard_offset_[i], delta + tensors_[i].offset,
                    tensors_[i].count * sizeof(float));
  std::vector<int64_t> counters(num_vw_);
  BlockedTimer blocked;
  // Shards in a fixed order; each shard's slot, counter and fold change inside one exclusive epoch.
  for (int s = 0; s < size_; ++s) {
    const int64_t mine = sel.tensors[s], n = shard_tensors_[s];
    if (mine == 0) continue;
    const MPI_Aint slot = slot_disp(s, static_cast<int>(wave % slots_));
    check_mpi(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, s, 0, win_), "MPI_Win_lock (parameter server push)");
    for (const Selection::Run& run : sel.runs[s]) {
      accumulate_floats(staging_[s].data() + run.shard_offset, run.count, s,
                        slot + MPI_Aint(run.shard_offset * sizeof(float)), win_);
      traffic_.push[static_cast<size_t>(s)] += run.count * sizeof(float);
    }
    check_mpi(MPI_Accumulate(&mine, 1, MPI_INT64_T, s, MPI_Aint(vw * sizeof(int64_t)), 1, MPI_INT64_T, MPI_SUM, win_),
              "MPI_Accumulate (parameter server counter)");
    check_mpi(MPI_Get_accumulate(nullptr, 0, MPI_INT64_T, counters.data(), num_vw_, MPI_INT64_T, s, 0, num_vw_,
                                 MPI_INT64_T, MPI_NO_OP, win_),
              "MPI_Get_accumulate (parameter server counters)");
    check_mpi(MPI_Win_flush(s, win_), "MPI_Win_flush (parameter server push)");
    // A protocol violation is reported after the epoch closes: an error thrown inside it would keep
    // the shard locked, and every other rank would hang on it instead of the job ending.
    std::string violation;
    const int64_t after = complete_waves(counters, n);
    counters[vw] -= mine;  // c_global before this push: the slot is free only within D waves of it
    const int64_t before = complete_waves(counters, n);
    if (!(counters[vw] + mine > wave * n && counters[vw] + mine <= (wave + 1) * n))
      violation = fmt::format("VW {} pushed part of wave {} after {} of the shard's {} tensors", vw, wave,
                              counters[vw], n);
    else if (wave - before >= slots_)
      violation = fmt::format("VW {} pushed wave {} with c_global {}, beyond D = {}", vw, wave, before, slots_ - 1);
    else if (after > before && after != wave + 1)
      violation = fmt::format("VW {}'s push of wave {} completed wave {}", vw, wave, after - 1);
    // The push that completes this wave on the shard moves its slot into w_global: w_global stays
    // "as of c_global".
    if (violation.empty() && after > before) {
      const size_t floats = shard_floats_[s];
      traffic_.push[static_cast<size_t>(s)] += 3 * floats * sizeof(float);  // read, add, clear
      get_floats(fold_.data(), floats, s, slot, win_);
      check_mpi(MPI_Win_flush(s, win_), "MPI_Win_flush (parameter server fold)");
      accumulate_floats(fold_.data(), floats, s, data_disp(), win_);
      std::fill(fold_.begin(), fold_.begin() + floats, 0.0f);
      for (size_t done = 0; done < floats; done += kMaxCount) {
        const int k = static_cast<int>(std::min(kMaxCount, floats - done));
        check_mpi(MPI_Accumulate(fold_.data() + done, k, MPI_FLOAT, s, slot + MPI_Aint(done * sizeof(float)), k,
                                 MPI_FLOAT, MPI_REPLACE, win_),
                  "MPI_Accumulate (parameter server slot reset)");
      }
    }
    check_mpi(MPI_Win_unlock(s, win_), "MPI_Win_unlock (parameter server push)");
    BATON_ASSERT(violation.empty(), "parameter server: {}", violation);
  }
}

std::vector<int64_t> ParamServer::read_shards(const Selection& sel, bool data) {
  std::vector<int64_t> c_global(size_, -1);
  std::vector<int64_t> counters(num_vw_);
  BlockedTimer blocked;
  for (int s = 0; s < size_; ++s) {
    if (sel.tensors[s] == 0) continue;
    check_mpi(MPI_Win_lock(MPI_LOCK_SHARED, s, 0, win_), "MPI_Win_lock (parameter server pull)");
    check_mpi(MPI_Get_accumulate(nullptr, 0, MPI_INT64_T, counters.data(), num_vw_, MPI_INT64_T, s, 0, num_vw_,
                                 MPI_INT64_T, MPI_NO_OP, win_),
              "MPI_Get_accumulate (parameter server counters)");
    if (data)
      for (const Selection::Run& run : sel.runs[s]) {
        get_floats(staging_[s].data() + run.shard_offset, run.count, s,
                   data_disp() + MPI_Aint(run.shard_offset * sizeof(float)), win_);
        traffic_.pull[static_cast<size_t>(s)] += run.count * sizeof(float);
      }
    check_mpi(MPI_Win_unlock(s, win_), "MPI_Win_unlock (parameter server pull)");
    c_global[s] = complete_waves(counters, shard_tensors_[s]);
  }
  return c_global;
}

std::optional<int64_t> ParamServer::try_pull(int64_t needs, float* out, const Selection& sel) {
  // Counters first (cheap): no data moves for a pull that must wait.
  for (int64_t c : read_shards(sel, false))
    if (c >= 0 && c < needs) return std::nullopt;
  for (int attempt = 0;; ++attempt) {
    const std::vector<int64_t> c = read_shards(sel, true);
    int64_t lo = INT64_MAX, hi = -1;
    for (int64_t x : c)
      if (x >= 0) lo = std::min(lo, x), hi = std::max(hi, x);
    if (hi < 0) return needs;  // an empty selection: nothing to wait for
    if (lo == hi) {
      BATON_ASSERT(lo >= needs, "parameter server: c_global went backwards");
      for (int s = 0; s < size_; ++s)
        for (const Selection::Run& run : sel.runs[s])
          for (int i : run.tensors)
            std::memcpy(out + tensors_[i].offset, staging_[s].data() + shard_offset_[i],
                        tensors_[i].count * sizeof(float));
      return lo;
    }
    // A wave was complete on some shards only while we read them: read again once it is on all.
    sleep_backoff(attempt, 50, 1600);
  }
}

std::string ParamServer::waiting_for(int64_t needs) {
  return needs <= 0 ? std::string("the parameter server")
                    : fmt::format("every virtual worker's wave {} (c_global >= {} of the server's waves)", needs - 1,
                                  needs);
}

int64_t ParamServer::pull(int64_t needs, float* out, const Selection& sel, double* waited_s) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int attempt = 0;; ++attempt) {
    if (const std::optional<int64_t> c = try_pull(needs, out, sel)) {
      if (waited_s) *waited_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return *c;
    }
    // Sleep, do not spin: the other ranks of this machine need the core to reach their pushes.
    // The stall watchdog's report names what the pull waits for.
    const std::string whom = waiting_for(needs);
    BlockedTimer blocked("parameter server pull", &whom);
    sleep_backoff(attempt, 50, 2000);
  }
}

}  // namespace baton::dist
