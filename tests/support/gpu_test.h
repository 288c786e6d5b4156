// GPU test programs (tests/gpu/, ctest label `gpu`): is there a CUDA device, and what does a test
// do without one. It skips, printing "skipped: no CUDA device" (the label's
// SKIP_REGULAR_EXPRESSION, tests/CMakeLists.txt), so the label runs anywhere; but with
// BATON_REQUIRE_GPU=1 in the environment -- a run on a GPU node, launch/gpu-check.sh -- a missing
// device FAILS the test, so a broken driver or a hidden GPU cannot pass as "everything skipped".
// The failure message must never contain the skip phrase (ctest would count it as a skip).
#pragma once
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

namespace baton::test {

// Why there is no usable device ("" when there is one): the runtime's own words, e.g. "CUDA driver
// version is insufficient for CUDA runtime version" or "no CUDA-capable device is detected".
inline const char* cuda_absent_reason() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) return cudaGetErrorString(err);
  return n > 0 ? "" : "cudaGetDeviceCount found 0 devices";
}

inline bool have_cuda() { return cuda_absent_reason()[0] == '\0'; }

inline bool gpu_required() {
  const char* v = std::getenv("BATON_REQUIRE_GPU");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

}  // namespace baton::test

// First statement of a GPU test's SetUp() or body: without a device, returns from it skipped --
// or failed when BATON_REQUIRE_GPU=1.
#define BATON_GPU_TEST_OR_SKIP()                                                                   \
  do {                                                                                             \
    if (!::baton::test::have_cuda()) {                                                             \
      if (::baton::test::gpu_required())                                                           \
        GTEST_FAIL() << "no CUDA device (" << ::baton::test::cuda_absent_reason()                   \
                     << "), and BATON_REQUIRE_GPU=1 requires one (nvidia-smi?)";                    \
      GTEST_SKIP() << "skipped: no CUDA device";                                                   \
    }                                                                                              \
  } while (0)
