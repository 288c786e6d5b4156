// dist_guard_fail: a job in which rank 1 fails while the others wait for it in a collective.
// guard_fail.sh runs it under mpirun and requires a prompt non-zero exit with rank 1's message;
// without the guard's abort the other ranks would wait in the barrier forever.
#include "core/error.h"
#include "dist/comm.h"
#include "dist/guard.h"

int main(int argc, char** argv) {
  using namespace baton::dist;
  MpiRuntime::init(&argc, &argv);
  const int rc = run_guarded([] {
    auto world = MpiRuntime::world();
    if (world->rank() == 1)
      throw baton::Error("bad input on rank 1", "fix the input of rank 1");
    world->barrier();  // never completes: rank 1 does not arrive
    return 0;
  });
  MpiRuntime::finalize();
  return rc;
}
