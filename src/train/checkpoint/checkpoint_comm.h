// The communicator a checkpoint is written over. baton does not initialise MPI for one-process
// runs, so "no MPI", MPI_COMM_NULL and a one-rank communicator all mean: this process alone.
#pragma once
#include <mpi.h>

namespace baton {

int checkpoint_comm_size(MPI_Comm comm);  // 1 when MPI is not (or no longer) initialised
int checkpoint_comm_rank(MPI_Comm comm);  // 0 likewise
void checkpoint_barrier(MPI_Comm comm);   // no-op for one rank

}  // namespace baton
