#include "train/checkpoint/checkpoint_comm.h"

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

}  // namespace baton
