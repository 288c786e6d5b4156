// detect_cuda(): asks the CUDA runtime for devices when the build has CUDA, else reports none.
#include "backend/device.h"

#ifdef BATON_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace baton {

CudaDeviceInfo detect_cuda() {
  CudaDeviceInfo info;
#ifdef BATON_HAVE_CUDA
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    info.error = cudaGetErrorString(err);
    return info;
  }
  info.count = n;
  if (n > 0) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, 0) == cudaSuccess) {
      info.name = p.name;
      info.memory_bytes = p.totalGlobalMem;
      info.sm_major = p.major;
      info.sm_minor = p.minor;
    }
  }
#else
  info.error = "built without CUDA";
#endif
  return info;
}

}  // namespace baton
