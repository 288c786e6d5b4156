#include "train/checkpoint/checkpoint_comm.h"

#include <fmt/format.h>

#include <climits>

#include "core/error.h"

namespace baton {
namespace {

bool usable(MPI_Comm comm) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized && comm != MPI_COMM_NULL;
}

}  // namespace

int checkpoint_comm_size(MPI_Comm comm) {
  int n = 1;
  if (usable(comm)) MPI_Comm_size(comm, &n);
  return n;
}

int checkpoint_comm_rank(MPI_Comm comm) {
  int r = 0;
  if (usable(comm)) MPI_Comm_rank(comm, &r);
  return r;
}

void checkpoint_barrier(MPI_Comm comm) {
  if (checkpoint_comm_size(comm) > 1) MPI_Barrier(comm);
}

void checkpoint_agree(MPI_Comm comm, const std::string& mine, const std::string& hint) {
  if (checkpoint_comm_size(comm) == 1) {
    if (!mine.empty()) throw AgreedError(mine, hint);
    return;
  }
  int first = mine.empty() ? INT_MAX : checkpoint_comm_rank(comm);
  MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, comm);
  if (first == INT_MAX) return;
  int n = static_cast<int>(mine.size());
  MPI_Bcast(&n, 1, MPI_INT, first, comm);
  std::string what(static_cast<size_t>(n), '\0');
  if (checkpoint_comm_rank(comm) == first) what = mine;
  MPI_Bcast(what.data(), n, MPI_CHAR, first, comm);
  throw AgreedError(first == 0 ? what : fmt::format("rank {}: {}", first, what), hint);
}

}  // namespace baton
