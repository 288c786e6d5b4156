// The write-once stop value on rank 0; see stop_board.h.
#include "dist/stop_board.h"

#include <exception>

#include "dist/mpi_comm.h"

namespace baton::dist {
namespace {

constexpr int64_t kEmpty = -1;  // posted values are >= 0

}  // namespace

StopBoard::StopBoard(MPI_Comm comm) {
  int rank = 0;
  check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  const MPI_Aint bytes = rank == 0 ? static_cast<MPI_Aint>(sizeof(int64_t)) : 0;
  check_mpi(MPI_Win_allocate(bytes, sizeof(int64_t), MPI_INFO_NULL, comm, &base_, &win_), "MPI_Win_allocate");
  if (rank == 0) {
    check_mpi(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win_), "MPI_Win_lock");
    *base_ = kEmpty;
    check_mpi(MPI_Win_unlock(0, win_), "MPI_Win_unlock");
  }
  check_mpi(MPI_Barrier(comm), "MPI_Barrier");  // the value is initialised before anyone reads it
}

StopBoard::~StopBoard() {
  // Collective: not while an error unwinds this rank alone (dist/param_server.cpp says why).
  if (std::uncaught_exceptions() > 0) return;
  if (win_ != MPI_WIN_NULL) MPI_Win_free(&win_);
}

// Write-once without MPI's atomic operations: an exclusive epoch (no other rank reads or writes
// meanwhile) that reads the value and writes it only when empty. (Open MPI 4.1's osc/rdma emulates
// compare-and-swap over the vader transport and crashes when a rank targets its own window; Get,
// Put and flush work everywhere the parameter server runs.)
int64_t StopBoard::raise(int64_t value) {
  int64_t found = kEmpty;
  check_mpi(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win_), "MPI_Win_lock");
  check_mpi(MPI_Get(&found, 1, MPI_INT64_T, 0, 0, 1, MPI_INT64_T, win_), "MPI_Get");
  check_mpi(MPI_Win_flush(0, win_), "MPI_Win_flush");
  if (found == kEmpty) check_mpi(MPI_Put(&value, 1, MPI_INT64_T, 0, 0, 1, MPI_INT64_T, win_), "MPI_Put");
  check_mpi(MPI_Win_unlock(0, win_), "MPI_Win_unlock");
  return found == kEmpty ? value : found;
}

std::optional<int64_t> StopBoard::read() {
  int64_t found = kEmpty;
  check_mpi(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win_), "MPI_Win_lock");
  check_mpi(MPI_Get(&found, 1, MPI_INT64_T, 0, 0, 1, MPI_INT64_T, win_), "MPI_Get");
  check_mpi(MPI_Win_unlock(0, win_), "MPI_Win_unlock");
  if (found == kEmpty) return std::nullopt;
  return found;
}

}  // namespace baton::dist
