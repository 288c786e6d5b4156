// bench_allreduce: MpiComm all_reduce (F32 SUM, in place) over the world, 1 KiB .. 64 MiB.
// Not a test (ctest label `bench`, excluded from CI). Run: mpirun -np N bench_allreduce [max MiB].
// Reports, like nccl-tests, the algorithm bandwidth (bytes / time) and the bus bandwidth
// algbw * 2(n-1)/n, which is what each rank's link carries in a ring all-reduce and so can be
// compared across rank counts. Time per size = the slowest rank's mean over the timed iterations.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "dist/comm.h"
#include "dist/guard.h"

int main(int argc, char** argv) {
  using namespace baton::dist;
  MpiRuntime::init(&argc, &argv);
  const int rc = run_guarded([&] {
    auto world = MpiRuntime::world();
    const int p = world->size();
    const size_t max_bytes = (argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 64) << 20;
    std::vector<float> buf(max_bytes / sizeof(float), 0.0f);  // zeros stay finite when summed
    if (world->rank() == 0)
      std::printf("# MpiComm all_reduce, %d ranks, float32 sum\n%12s %8s %12s %12s %12s\n", p,
                  "bytes", "iters", "time (us)", "algbw GB/s", "busbw GB/s");
    for (size_t bytes = 1024; bytes <= max_bytes; bytes *= 4) {
      const size_t n = bytes / sizeof(float);
      // About 64 MiB of traffic per size, at least 5 and at most 200 iterations, after warm-up.
      const int iters = static_cast<int>(std::clamp<size_t>((64u << 20) / bytes, 5, 200));
      for (int i = 0; i < 2; ++i) world->all_reduce(buf.data(), n, DType::F32, ReduceOp::SUM);
      world->barrier();
      const double t0 = MPI_Wtime();
      for (int i = 0; i < iters; ++i) world->all_reduce(buf.data(), n, DType::F32, ReduceOp::SUM);
      const double local = (MPI_Wtime() - t0) / iters;
      const double t = world->all_reduce_scalar(local, ReduceOp::MAX);
      const double algbw = bytes / t / 1e9;
      if (world->rank() == 0)
        std::printf("%12zu %8d %12.1f %12.3f %12.3f\n", bytes, iters, t * 1e6, algbw,
                    algbw * 2.0 * (p - 1) / p);
    }
    return 0;
  });
  MpiRuntime::finalize();
  return rc;
}
