#include "train/checkpoint/checkpoint_comm.h"

#include "core/error.h"
#include "dist/agree.h"
#include "dist/mpi_comm.h"

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
  dist::MpiComm view(comm, /*owned=*/false);
  dist::agree_on_problems(view, mine, hint);
}

}  // namespace baton
