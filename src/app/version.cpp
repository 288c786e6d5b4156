#include <fmt/format.h>

#include "app/app.h"
#include "core/build_info.h"

namespace baton::app {

std::string version_text() {
  namespace b = baton::build;
  std::string cuda = b::cuda ? fmt::format("on (archs {})", b::cuda_archs) : "off";
  return fmt::format(
      "baton {}\n"
      "  build:         {} ({})\n"
      "  cuda:          {}\n"
      "  nccl:          {}\n"
      "  mpi:           on (MPI {})\n"
      "  parallel hdf5: {} (HDF5 {})\n"
      "  blas:          {}\n",
      b::version, b::build_type, b::compiler, cuda, b::nccl ? "on" : "off", b::mpi_version,
      b::parallel_hdf5 ? "on" : "off", b::hdf5_version, b::blas);
}

}  // namespace baton::app
