// Where this rank sits on its machine: the ranks sharing a node (MPI_COMM_TYPE_SHARED), so each
// rank can pick its own GPU (device = local_rank % devices) whatever the launcher (mpirun, srun)
// and without reading launcher-specific environment variables.
#pragma once

namespace baton::dist {

struct NodeLocal {
  int local_rank = 0;  // 0 .. local_size-1, in world-rank order
  int local_size = 1;  // ranks on this node
};

// Collective over MPI_COMM_WORLD the first time (MpiRuntime::init must have run); later calls
// return the same answer without communicating.
NodeLocal node_local();

}  // namespace baton::dist
