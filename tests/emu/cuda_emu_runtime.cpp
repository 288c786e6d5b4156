// cuda_emu runtime: the CUDA runtime API calls that kernels/*.cu's launchers and the GPU tests
// make, on host memory, for programs built against the emulated kernels (baton_kernels_emulated)
// instead of cudart. Test-only: a program links either this or the real libcudart, never both.
//
// What it does (one emulated device, device 0, with an H100 SXM's limits):
//   - cudaMalloc: host memory aligned to 256 bytes (as cudaMalloc), tracked so that cudaFree of an
//     unknown pointer fails with cudaErrorInvalidValue; the bytes start as 0xFF (NaN as float and
//     bf16: a kernel that reads memory nobody wrote shows NaN); under AddressSanitizer the bytes
//     past the size asked for are poisoned, so a read or write past the end is reported, which a
//     GPU would let pass inside the 256-byte rounding. cudaMallocHost/cudaHostAlloc:
//     the same, as pinned memory. cudaMemGetInfo: 80 GiB in total.
//   - cudaMemcpy/cudaMemcpyAsync (every kind: all pointers are host pointers), cudaMemset,
//     cudaMemsetAsync: memmove/memset, complete on return. Streams and events exist as handles;
//     every operation is synchronous, so cudaStreamSynchronize, cudaDeviceSynchronize,
//     cudaStreamWaitEvent, cudaEventSynchronize do nothing; cudaEventElapsedTime gives host time.
//   - Errors: cudaGetLastError/cudaPeekAtLastError report what cuda_emu::launch_kernel's
//     configuration checks or these calls recorded (per host thread, as the runtime).
//     cuda_emu_launch_checks() counts the cudaGetLastError calls of all threads: the launchers make
//     exactly one after each launch (check_launch, kernels/common.cuh), so tests count a launcher's
//     kernel launches with it (a test declares it weak, so the same file links against cudart).
//   - cudaDeviceGetAttribute: the H100 SXM5 values below (kH100); other attributes fail with
//     cudaErrorInvalidValue. cudaFuncSetAttribute: MaxDynamicSharedMemorySize up to the opt-in
//     limit (227 KiB), recorded per kernel for launch_kernel's check; PreferredSharedMemoryCarveout
//     accepted and ignored.
// Not provided (link errors name them): graphs, memory pools, peer access, textures, IPC, managed
// memory, cudaGetDeviceProperties.
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include <sanitizer/asan_interface.h>  // ASAN_(UN)POISON_MEMORY_REGION: no-ops without ASan

#include "cuda_emu.h"

struct CUstream_st {
  int unused;
};
struct CUevent_st {
  std::chrono::steady_clock::time_point t;
  bool recorded = false;
};

namespace {

constexpr size_t kAlign = 256;
constexpr size_t kTotalMemory = size_t(80) << 30;

// The device attributes reported (NVIDIA H100 SXM5 80GB, compute capability 9.0).
const std::map<cudaDeviceAttr, int> kH100 = {
    {cudaDevAttrMaxThreadsPerBlock, 1024},
    {cudaDevAttrMaxBlockDimX, 1024},
    {cudaDevAttrMaxBlockDimY, 1024},
    {cudaDevAttrMaxBlockDimZ, 64},
    {cudaDevAttrMaxGridDimX, 2147483647},
    {cudaDevAttrMaxGridDimY, 65535},
    {cudaDevAttrMaxGridDimZ, 65535},
    {cudaDevAttrMaxSharedMemoryPerBlock, 49152},
    {cudaDevAttrMaxSharedMemoryPerBlockOptin, 232448},        // 227 KiB
    {cudaDevAttrMaxSharedMemoryPerMultiprocessor, 233472},    // 228 KiB
    {cudaDevAttrTotalConstantMemory, 65536},
    {cudaDevAttrWarpSize, 32},
    {cudaDevAttrMaxRegistersPerBlock, 65536},
    {cudaDevAttrMaxRegistersPerMultiprocessor, 65536},
    {cudaDevAttrMultiProcessorCount, 132},
    {cudaDevAttrMaxThreadsPerMultiProcessor, 2048},
    {cudaDevAttrMaxBlocksPerMultiprocessor, 32},
    {cudaDevAttrComputeCapabilityMajor, 9},
    {cudaDevAttrComputeCapabilityMinor, 0},
    {cudaDevAttrL2CacheSize, 52428800},                       // 50 MiB
    {cudaDevAttrGlobalMemoryBusWidth, 5120},
    {cudaDevAttrConcurrentKernels, 1},
    {cudaDevAttrUnifiedAddressing, 1},
    {cudaDevAttrIntegrated, 0},
};

std::mutex g_mu;
std::atomic<long long> g_last_error_calls{0};
std::map<const void*, size_t> g_allocs;  // live cudaMalloc/cudaMallocHost blocks -> bytes
size_t g_allocated = 0;

cudaError_t fail(cudaError_t e) {
  cuda_emu::t_last_error = e;
  return e;
}

cudaError_t alloc(void** p, size_t size) {
  if (p == nullptr) return fail(cudaErrorInvalidValue);
  const size_t bytes = (size + kAlign - 1) / kAlign * kAlign + (size == 0 ? kAlign : 0);
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_allocated + bytes > kTotalMemory) return fail(cudaErrorMemoryAllocation);
  void* q = std::aligned_alloc(kAlign, bytes);
  if (q == nullptr) return fail(cudaErrorMemoryAllocation);
  std::memset(q, 0xFF, bytes);
  ASAN_POISON_MEMORY_REGION(static_cast<char*>(q) + size, bytes - size);
  g_allocs[q] = bytes;
  g_allocated += bytes;
  *p = q;
  return cudaSuccess;
}

cudaError_t release(void* p) {
  if (p == nullptr) return cudaSuccess;
  std::lock_guard<std::mutex> lk(g_mu);
  const auto it = g_allocs.find(p);
  if (it == g_allocs.end()) return fail(cudaErrorInvalidValue);
  g_allocated -= it->second;
  ASAN_UNPOISON_MEMORY_REGION(p, it->second);
  g_allocs.erase(it);
  std::free(p);
  return cudaSuccess;
}

cudaError_t copy(void* dst, const void* src, size_t n) {
  if (n == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return fail(cudaErrorInvalidValue);
  std::memmove(dst, src, n);
  return cudaSuccess;
}

cudaError_t fill(void* p, int value, size_t n) {
  if (n == 0) return cudaSuccess;
  if (p == nullptr) return fail(cudaErrorInvalidValue);
  std::memset(p, value, n);
  return cudaSuccess;
}

}  // namespace

extern "C" {

// ---- errors ------------------------------------------------------------------------------------
long long cuda_emu_launch_checks(void) { return g_last_error_calls.load(); }
cudaError_t cudaGetLastError(void) {
  g_last_error_calls.fetch_add(1);
  const cudaError_t e = cuda_emu::t_last_error;
  cuda_emu::t_last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError(void) { return cuda_emu::t_last_error; }
const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorInvalidDeviceFunction: return "cudaErrorInvalidDeviceFunction";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    default: return "cudaErrorUnknown (cuda_emu)";
  }
}
const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    default: return "unknown error (cuda_emu)";
  }
}

// ---- device ------------------------------------------------------------------------------------
cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return fail(cudaErrorInvalidValue);
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return fail(cudaErrorInvalidValue);
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  return device == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice);
}
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t cudaDeviceReset(void) { return cudaSuccess; }
cudaError_t cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
  if (value == nullptr) return fail(cudaErrorInvalidValue);
  if (device != 0) return fail(cudaErrorInvalidDevice);
  const auto it = kH100.find(attr);
  if (it == kH100.end()) return fail(cudaErrorInvalidValue);
  *value = it->second;
  return cudaSuccess;
}
cudaError_t cudaFuncSetAttribute(const void* func, enum cudaFuncAttribute attr, int value) {
  if (func == nullptr) return fail(cudaErrorInvalidDeviceFunction);
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (value < 0 || size_t(value) > cuda_emu::detail::kSmemOptin) return fail(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> lk(cuda_emu::g_func_mu);
    cuda_emu::g_func_max_dynamic_smem[func] = value;
    return cudaSuccess;
  }
  if (attr == cudaFuncAttributePreferredSharedMemoryCarveout) return cudaSuccess;
  return fail(cudaErrorInvalidValue);
}

// ---- memory ------------------------------------------------------------------------------------
cudaError_t cudaMalloc(void** devPtr, size_t size) { return alloc(devPtr, size); }
cudaError_t cudaFree(void* devPtr) { return release(devPtr); }
cudaError_t cudaMallocHost(void** ptr, size_t size) { return alloc(ptr, size); }
cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int) { return alloc(pHost, size); }
cudaError_t cudaFreeHost(void* ptr) { return release(ptr); }
cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  if (free == nullptr || total == nullptr) return fail(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lk(g_mu);
  *free = kTotalMemory - g_allocated;
  *total = kTotalMemory;
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind) {
  return copy(dst, src, count);
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, enum cudaMemcpyKind,
                            cudaStream_t) {
  return copy(dst, src, count);
}
cudaError_t cudaMemset(void* devPtr, int value, size_t count) { return fill(devPtr, value, count); }
cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t) {
  return fill(devPtr, value, count);
}

// ---- streams and events ------------------------------------------------------------------------
cudaError_t cudaStreamCreate(cudaStream_t* pStream) {
  if (pStream == nullptr) return fail(cudaErrorInvalidValue);
  *pStream = new CUstream_st{};
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int) {
  return cudaStreamCreate(pStream);
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  delete stream;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamQuery(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned int) { return cudaSuccess; }
cudaError_t cudaEventCreate(cudaEvent_t* event) {
  if (event == nullptr) return fail(cudaErrorInvalidValue);
  *event = new CUevent_st{};
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) {
  return cudaEventCreate(event);
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t) {
  if (event == nullptr) return fail(cudaErrorInvalidValue);
  event->t = std::chrono::steady_clock::now();
  event->recorded = true;
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (ms == nullptr || start == nullptr || end == nullptr) return fail(cudaErrorInvalidValue);
  if (!start->recorded || !end->recorded) return fail(cudaErrorInvalidResourceHandle);
  *ms = std::chrono::duration<float, std::milli>(end->t - start->t).count();
  return cudaSuccess;
}

}  // extern "C"
