// node_local(): one MPI_Comm_split_type over the world, freed at once (see node_local.h).
#include "dist/node_local.h"

#include <mpi.h>

#include "core/error.h"
#include "dist/comm.h"
#include "dist/mpi_comm.h"

namespace baton::dist {

NodeLocal node_local() {
  BATON_ASSERT(MpiRuntime::initialized(), "node_local() before MpiRuntime::init()");
  // Computed once: later calls (e.g. by a session over a sub-communicator, whose ranks alone
  // could not join a world collective) return the first answer.
  static const NodeLocal cached = [] {
  int world_rank = 0;
  check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank), "MPI_Comm_rank");
  MPI_Comm node = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL,
                                &node),
            "MPI_Comm_split_type");
  NodeLocal out;
  MPI_Comm_rank(node, &out.local_rank);
  MPI_Comm_size(node, &out.local_size);
  MPI_Comm_free(&node);
  return out;
  }();
  return cached;
}

}  // namespace baton::dist
