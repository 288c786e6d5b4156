// MpiRuntime: process-wide MPI lifetime. init() is idempotent and works without mpirun (MPI
// singleton: a world of one); abort() ends every rank of the job promptly, and without MPI it is
// a plain _exit, so callers never need to know how the process was launched.
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "dist/comm.h"
#include "dist/mpi_comm.h"
#include "dist/mpi_types.h"

namespace baton::dist {

void MpiRuntime::init(int* argc, char*** argv, bool thread_multiple) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  BATON_REQUIRE(!finalized, "MPI was initialised again after MPI_Finalize",
                "call MpiRuntime::init once per process, before any Comm is used");
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    // Started without a launcher (plain `baton train`): Open MPI's singleton would otherwise start
    // an orted daemon, which needs orted and ssh/rsh on the PATH — absent on many GPU nodes and
    // in bundles (launch/bundle.sh). An isolated singleton needs neither. The user's own setting
    // wins; other MPI implementations ignore the variable.
    const bool launched = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK") ||
                          std::getenv("PMI_RANK") || std::getenv("SLURM_PROCID");
    if (!launched) setenv("OMPI_MCA_ess_singleton_isolated", "1", 0);
    // SERIALIZED, not FUNNELED: a communication helper thread may issue MPI calls as long as
    // calls never overlap; OpenMP compute threads never call MPI. MULTIPLE only for the runs that
    // use it (a WSP server client's thread): some one-sided transports refuse windows under it
    // (Open MPI's osc/pt2pt on networks without RDMA), so it is not asked for by default.
    int provided = MPI_THREAD_SINGLE;
    int rc = MPI_Init_thread(argc, argv, thread_multiple ? MPI_THREAD_MULTIPLE : MPI_THREAD_SERIALIZED, &provided);
    BATON_REQUIRE(rc == MPI_SUCCESS, "MPI_Init_thread failed",
                  "check the MPI installation (mpirun --version) and the launcher's environment");
    BATON_REQUIRE(provided >= MPI_THREAD_FUNNELED,
                  fmt::format("MPI provides thread level {}, baton needs at least FUNNELED", provided),
                  "use an MPI built with thread support (Open MPI's default build has it)");
  }
  // Errors as return codes on every communicator derived from the world (see mpi_comm.h).
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

bool MpiRuntime::thread_multiple() {
  if (!initialized()) return false;
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  return provided >= MPI_THREAD_MULTIPLE;
}

bool MpiRuntime::initialized() {
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  return inited && !finalized;
}

void MpiRuntime::finalize() {
  if (!initialized()) return;
  mpi::free_ops();
  MPI_Finalize();
}

void MpiRuntime::abort(int code) {
  // Flush first: MPI_Abort kills this process too, and the error message must reach the user.
  std::fflush(stdout);
  std::fflush(stderr);
  if (initialized()) MPI_Abort(MPI_COMM_WORLD, code);
  _exit(code);  // without MPI (or should MPI_Abort ever return)
}

std::unique_ptr<Comm> MpiRuntime::world() {
  BATON_ASSERT(initialized(), "MpiRuntime::world() before MpiRuntime::init()");
  return std::make_unique<MpiComm>(MPI_COMM_WORLD, /*owned=*/false);
}

}  // namespace baton::dist
