// The write-once stop value on rank 0; see stop_board.h.
#include "dist/stop_board.h"

#include <exception>

#include "dist/mpi_comm.h"

namespace baton::dist {
namespace {

constexpr int64_t kEmpty = -1;  // posted values are >= 0
constexpr int kDecided = 0, kCopy = 1;  // the window's two values

}  // namespace

StopBoard::StopBoard(MPI_Comm comm) {
  check_mpi(MPI_Comm_rank(comm, &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm, &size_), "MPI_Comm_size");
  // [kDecided] on rank 0: the first raise's value; [kCopy] on every rank: its copy, read locally.
  check_mpi(MPI_Win_allocate(2 * sizeof(int64_t), sizeof(int64_t), MPI_INFO_NULL, comm, &base_, &win_),
            "MPI_Win_allocate");
  check_mpi(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank_, 0, win_), "MPI_Win_lock");
  base_[kDecided] = base_[kCopy] = kEmpty;
  check_mpi(MPI_Win_unlock(rank_, win_), "MPI_Win_unlock");
  check_mpi(MPI_Barrier(comm), "MPI_Barrier");  // the values are initialised before anyone reads them
}

StopBoard::~StopBoard() {
  // Collective: not while an error unwinds this rank alone (dist/param_server.cpp says why).
  if (std::uncaught_exceptions() > 0) return;
  if (win_ != MPI_WIN_NULL) MPI_Win_free(&win_);
}

// Write-once without MPI's atomic operations: an exclusive epoch on rank 0 (no other rank reads or
// writes meanwhile) that reads the decided value and writes it only when empty. (Open MPI 4.1's
// osc/rdma emulates compare-and-swap over the vader transport and crashes when a rank targets its
// own window; Get, Put and flush work everywhere the parameter server runs.) Then the decided
// value goes to every rank's copy before raise() returns, so a read that starts after it sees it.
int64_t StopBoard::raise(int64_t value) {
  int64_t decided = kEmpty;
  check_mpi(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win_), "MPI_Win_lock");
  check_mpi(MPI_Get(&decided, 1, MPI_INT64_T, 0, kDecided, 1, MPI_INT64_T, win_), "MPI_Get");
  check_mpi(MPI_Win_flush(0, win_), "MPI_Win_flush");
  if (decided == kEmpty) {
    decided = value;
    check_mpi(MPI_Put(&decided, 1, MPI_INT64_T, 0, kDecided, 1, MPI_INT64_T, win_), "MPI_Put");
  }
  check_mpi(MPI_Win_unlock(0, win_), "MPI_Win_unlock");
  for (int r = 0; r < size_; ++r) {
    check_mpi(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, r, 0, win_), "MPI_Win_lock");
    check_mpi(MPI_Put(&decided, 1, MPI_INT64_T, r, kCopy, 1, MPI_INT64_T, win_), "MPI_Put");
    check_mpi(MPI_Win_unlock(r, win_), "MPI_Win_unlock");
  }
  return decided;
}

// The own copy, in an epoch on this rank alone: no message to another rank, so a read costs the
// same whatever the others do (rank 0 busy computing included).
std::optional<int64_t> StopBoard::read() {
  check_mpi(MPI_Win_lock(MPI_LOCK_SHARED, rank_, 0, win_), "MPI_Win_lock");
  const int64_t found = base_[kCopy];
  check_mpi(MPI_Win_unlock(rank_, win_), "MPI_Win_unlock");
  if (found == kEmpty) return std::nullopt;
  return found;
}

}  // namespace baton::dist
