// run_guarded / fail_job: turn an exception on any rank into a prompt end of the whole job with
// that rank's message (see guard.h).
#include "dist/guard.h"

#include <mpi.h>

#include <cstdio>
#include <exception>

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

int run_guarded(const std::function<int()>& body) {
  try {
    return body();
  } catch (const Error& e) {
    return fail_job(e.what(), e.hint());
  } catch (const std::exception& e) {
    return fail_job(e.what(), "");
  } catch (...) {
    return fail_job("unknown exception", "this is a bug in baton; please report it");
  }
}

}  // namespace baton::dist
