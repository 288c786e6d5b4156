// The communicator a checkpoint is written over. baton does not initialise MPI for one-process
// runs, so "no MPI", MPI_COMM_NULL and a one-rank communicator all mean: this process alone.
#pragma once
#include <mpi.h>

#include <string>

namespace baton {

int checkpoint_comm_size(MPI_Comm comm);  // 1 when MPI is not (or no longer) initialised
int checkpoint_comm_rank(MPI_Comm comm);  // 0 likewise
void checkpoint_barrier(MPI_Comm comm);   // no-op for one rank

// A save's step whose outcome may differ between ranks (a write that failed on one): every rank
// passes its finding (empty = none); when any rank found one, every rank throws the same
// AgreedError with the lowest such rank's finding, so no rank goes on into a collective the others
// left (dist::agree_on_problems over `comm`). Plain MPI collectives only: nothing here can wait on
// a file system.
void checkpoint_agree(MPI_Comm comm, const std::string& mine, const std::string& hint);

}  // namespace baton
