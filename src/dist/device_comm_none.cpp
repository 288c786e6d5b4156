// make_device_comm for builds without NCCL (compiled only then; src/dist/CMakeLists.txt): callers
// built without CUDA still link, and a multi-rank GPU run fails with a message instead.
#include "core/error.h"
#include "dist/device_comm.h"

namespace baton::dist {

bool device_comm_available() { return false; }

std::unique_ptr<Comm> make_device_comm(std::unique_ptr<Comm> /*mpi*/, int /*cuda_device*/,
                                       void* /*compute_stream*/) {
  throw Error("multi-rank GPU training needs NCCL; this build has none",
              "install NCCL (libnccl-dev) and rebuild with -DBATON_CUDA=ON, or train on one GPU "
              "per job, or use the CPU backend for multi-rank runs");
}

}  // namespace baton::dist
