// run_guarded / fail_job: turn an exception on any rank into a prompt end of the whole job with
// that rank's message (see guard.h).
#include "dist/guard.h"

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <thread>

#include "core/error.h"
#include "dist/comm.h"

namespace baton::dist {

int fail_job(const std::string& what, const std::string& hint) {
  int rank = 0, size = 1;
  if (MpiRuntime::initialized()) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
  }
  // One fprintf per line so lines from different ranks do not interleave mid-line.
  if (size > 1)
    std::fprintf(stderr, "error: [rank %d] %s\n", rank, what.c_str());
  else
    std::fprintf(stderr, "error: %s\n", what.c_str());
  if (!hint.empty()) std::fprintf(stderr, "hint: %s\n", hint.c_str());
  std::fflush(stderr);
  if (size > 1) MpiRuntime::abort(1);
  return 1;
}

// An AgreedError: rank 0 prints it; every rank then waits (up to a few seconds, sleeping, not
// spinning) until all have reached the same point, so that the abort cannot cut rank 0's message
// off. A rank that does not see the others arrive in time reports the error itself.
static int fail_job_agreed(const std::string& what, const std::string& hint) {
  int rank = 0, size = 1;
  if (MpiRuntime::initialized()) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
  }
  if (size == 1) return fail_job(what, hint);
  if (rank == 0) {
    std::fprintf(stderr, "error: %s\n", what.c_str());
    if (!hint.empty()) std::fprintf(stderr, "hint: %s\n", hint.c_str());
    std::fflush(stderr);
  }
  MPI_Request req;
  MPI_Ibarrier(MPI_COMM_WORLD, &req);
  int done = 0;
  for (int ms = 0; ms < 5000 && !done; ++ms) {
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!done && rank != 0) {
    std::fprintf(stderr, "error: [rank %d] %s\n", rank, what.c_str());
    std::fflush(stderr);
  }
  MpiRuntime::abort(1);
}

int run_guarded(const std::function<int()>& body) {
  try {
    return body();
  } catch (const AgreedError& e) {
    return fail_job_agreed(e.what(), e.hint());
  } catch (const Error& e) {
    return fail_job(e.what(), e.hint());
  } catch (const std::exception& e) {
    return fail_job(e.what(), "");
  } catch (...) {
    return fail_job("unknown exception", "this is a bug in baton; please report it");
  }
}

}  // namespace baton::dist
