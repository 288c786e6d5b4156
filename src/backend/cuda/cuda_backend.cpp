// CudaBackend (see cuda_backend.h). Host side only: memory, the stream, the cuBLAS handle, and one
// call into kernels/ per op.
//
// What allocates device memory (DESIGN §9 arenas; issue 6 "no cudaMalloc after step 0"):
//  - alloc(): from the arena; a cudaMalloc happens only when no free block fits (the model's
//    parameters, gradients, optimizer state and activations are allocated before the first step);
//  - the op scratch (bias/layernorm partials, attention dP/dS of one batch row, embedding buckets,
//    sum_squares partials): one buffer that grows to the largest request, i.e. during the first
//    step; it is then reused;
//  - the cuBLAS workspace (32 MiB) at construction, so cuBLAS never allocates on its own;
//  - the CNN ops' buffers (cudnn_ops.h: cuDNN's workspace, fp32 copies, per-channel vectors),
//    grown from the arena like the op scratch; the cuDNN handle is created at the first CNN op.
// Everything runs on one non-blocking stream; to_device/to_host and sum_squares synchronise it, so
// host buffers may be reused as soon as they return. embedding_backward copies the tokens to the
// host (B*T ints, a synchronisation) to bucket them deterministically.
#include "backend/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <array>
#include <cmath>
#include <cstring>
#include <map>
#include <new>
#include <vector>

#include "backend/cuda/cudnn_ops.h"
#include "backend/cuda/cudnn_sdpa.h"
#include "core/bytes.h"
#include "core/error.h"
#include "core/log.h"
#include "kernels/adamw.cuh"
#include "kernels/dropout.cuh"
#include "kernels/sgd.cuh"
#include "kernels/attention.cuh"
#include "kernels/cast.cuh"
#include "kernels/flash_attention.cuh"
#include "kernels/gemm_lt.cuh"
#include "kernels/matmul_bf16.cuh"
#include "kernels/classifier.cuh"
#include "kernels/cnn.cuh"
#include "kernels/elementwise.cuh"
#include "kernels/embedding.cuh"
#include "kernels/gelu.cuh"
#include "kernels/gemm.cuh"
#include "kernels/layernorm.cuh"
#include "kernels/matmul.cuh"
#include "kernels/reduce.cuh"

// Under the CPU emulator (tests/emu: BATON_CUDA_HOST_MEMORY, device memory is host memory) built
// with AddressSanitizer (launch/sanitize.sh), the arena marks which of its bytes are handed out, so
// an op or kernel that reads or writes past its tensor — into a neighbour, the alignment slack or a
// free block: silent on a GPU, where all of them lie in one cudaMalloc chunk — is reported.
#if defined(BATON_CUDA_HOST_MEMORY) && defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define BATON_ARENA_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define BATON_ARENA_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define BATON_ARENA_POISON(p, n) ((void)(p), (void)(n))
#define BATON_ARENA_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace baton {
namespace {

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw Error(fmt::format("CUDA: {}: {}", what, cudaGetErrorString(e)),
                "check the GPU with nvidia-smi; rerun with CUDA_LAUNCH_BLOCKING=1 to locate a "
                "failing kernel");
}

// Device memory arena: cudaMalloc'd chunks, each sub-allocated first-fit by address with a free
// list that coalesces neighbours on release. 256-byte alignment (cudaMalloc's; >= the 64 the
// Backend contract asks for). Not thread-safe (one backend, one host thread).
class DeviceArena {
 public:
  static constexpr size_t kAlign = 256;
  static constexpr size_t kMinChunk = size_t(64) << 20;

  ~DeviceArena() {
    for (auto& c : chunks_) {
      BATON_ARENA_UNPOISON(c.base, c.size);
      cudaFree(c.base);
    }
  }

  // An emulated smaller device (Backend::set_memory_limit): the bytes in use never pass it.
  void set_limit(const MemoryLimit& limit) { limit_ = limit; }
  const MemoryLimit& limit() const { return limit_; }

  void* alloc(size_t bytes) {
    const size_t size = std::max<size_t>(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
    if (limit_.bytes != 0 && in_use_ + size > limit_.bytes) throw memory_limit_error(limit_, bytes, in_use_);
    for (auto& c : chunks_) {
      for (auto it = c.free.begin(); it != c.free.end(); ++it) {
        if (it->second < size) continue;
        char* p = it->first;
        const size_t rest = it->second - size;
        c.free.erase(it);
        if (rest > 0) c.free.emplace(p + size, rest);
        return take(p, size, bytes);
      }
    }
    const size_t chunk = std::max(size, kMinChunk);
    void* base = nullptr;
    const cudaError_t e = cudaMalloc(&base, chunk);
    if (e != cudaSuccess) {
      cudaGetLastError();  // clear the sticky-free error state
      throw Error(fmt::format("CUDA: out of device memory allocating {:.1f} MiB ({:.1f} MiB in use, "
                              "{:.1f} MiB reserved): {}",
                              double(chunk) / (1 << 20), double(in_use_) / (1 << 20),
                              double(reserved_) / (1 << 20), cudaGetErrorString(e)),
                  "reduce train.micro_batch or model size, or enable parallel.recompute");
    }
    mallocs_++;
    reserved_ += chunk;
    chunks_.push_back({static_cast<char*>(base), chunk, {}});
    BATON_ARENA_POISON(base, chunk);
    if (chunk > size) chunks_.back().free.emplace(static_cast<char*>(base) + size, chunk - size);
    return take(static_cast<char*>(base), size, bytes);
  }

  void release(void* ptr) {
    if (ptr == nullptr) return;
    char* p = static_cast<char*>(ptr);
    auto used = used_.find(p);
    BATON_ASSERT(used != used_.end(), "CudaBackend::release: {} was not allocated here", ptr);
    size_t size = used->second;
    used_.erase(used);
    in_use_ -= size;
    BATON_ARENA_POISON(p, size);
    for (auto& c : chunks_) {
      if (p < c.base || p >= c.base + c.size) continue;
      auto next = c.free.lower_bound(p);
      if (next != c.free.end() && p + size == next->first) {
        size += next->second;
        next = c.free.erase(next);
      }
      if (next != c.free.begin()) {
        auto prev = std::prev(next);
        if (prev->first + prev->second == p) {
          prev->second += size;
          return;
        }
      }
      c.free.emplace(p, size);
      return;
    }
  }

  CudaMemoryStats stats() const { return {reserved_, in_use_, peak_, mallocs_}; }

 private:
  struct Chunk {
    char* base;
    size_t size;
    std::map<char*, size_t> free;  // address -> bytes
  };
  // Hands out `size` bytes at p (bytes of them asked for).
  void* take(char* p, size_t size, size_t bytes) {
    BATON_ARENA_UNPOISON(p, bytes);
    used_.emplace(p, size);
    in_use_ += size;
    peak_ = std::max(peak_, in_use_);
    return p;
  }
  MemoryLimit limit_;
  std::vector<Chunk> chunks_;
  std::map<char*, size_t> used_;
  size_t reserved_ = 0, in_use_ = 0, peak_ = 0;
  int mallocs_ = 0;
};

using bf16 = __nv_bfloat16;
float* F(void* p) { return static_cast<float*>(p); }
const float* CF(const void* p) { return static_cast<const float*>(p); }
bf16* H(void* p) { return static_cast<bf16*>(p); }
const bf16* CH(const void* p) { return static_cast<const bf16*>(p); }

// The op-time table's clock on a GPU: a pair of events recorded on the stream around each op, read
// when the table asks (one synchronisation then, none per op); the events are reused.
class EventClock final : public Backend::OpClock {
 public:
  explicit EventClock(cudaStream_t stream) : stream_(stream) {}
  ~EventClock() override {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }
  EventClock(const EventClock&) = delete;
  EventClock& operator=(const EventClock&) = delete;
  void start() override { record(); }
  void stop() override { record(); }
  std::vector<double> take() override {
    std::vector<double> ms;
    if (used_ == 0) return ms;
    cuda_check(cudaEventSynchronize(events_[used_ - 1]), "op clock: cudaEventSynchronize");
    for (size_t i = 0; i + 1 < used_; i += 2) {
      float m = 0;
      cuda_check(cudaEventElapsedTime(&m, events_[i], events_[i + 1]), "op clock: cudaEventElapsedTime");
      ms.push_back(m);
    }
    used_ = 0;
    return ms;
  }

 private:
  void record() {
    if (used_ == events_.size()) {
      cudaEvent_t e = nullptr;
      cuda_check(cudaEventCreate(&e), "op clock: cudaEventCreate");
      events_.push_back(e);
    }
    cuda_check(cudaEventRecord(events_[used_++], stream_), "op clock: cudaEventRecord");
  }
  cudaStream_t stream_;
  std::vector<cudaEvent_t> events_;
  size_t used_ = 0;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, DType act, AttentionKernel attention)
      : device_(device), act_(act), bf16_(act == DType::BF16), attention_(attention) {
    BATON_REQUIRE(attention == AttentionKernel::AUTO || act == DType::BF16,
                  fmt::format("precision.attention = \"{}\" is a bf16 kernel, but precision.compute = \"{}\"",
                              to_string(attention), dtype_name(act)),
                  "set precision.compute = \"bf16\", or precision.attention = \"auto\"");
    BATON_REQUIRE(act == DType::F32 || act == DType::BF16,
                  fmt::format("the CUDA backend cannot compute in {}", dtype_name(act)),
                  "use precision.compute = \"bf16\" or \"fp32\"");
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    BATON_REQUIRE(e == cudaSuccess && n > device && device >= 0,
                  fmt::format("no CUDA device {} ({})", device,
                              e == cudaSuccess ? fmt::format("{} visible", n) : cudaGetErrorString(e)),
                  "set precision.device = \"cpu\" (or \"auto\"), or run on a GPU node");
    cuda_check(cudaSetDevice(device_), "cudaSetDevice");
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    kernels::check_cublas(cublasCreate(&cublas_), "cublasCreate");
    kernels::check_cublas(cublasSetStream(cublas_, stream_), "cublasSetStream");
    // fp32 exactly: no TF32 (also not via NVIDIA_TF32_OVERRIDE), no reduced-precision reductions.
    kernels::check_cublas(cublasSetMathMode(cublas_, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode");
    // Deterministic: cuBLAS may not use atomics (the default, stated here on purpose).
    kernels::check_cublas(cublasSetAtomicsMode(cublas_, CUBLAS_ATOMICS_NOT_ALLOWED), "cublasSetAtomicsMode");
    workspace_ = arena_.alloc(kCublasWorkspace);
    kernels::check_cublas(cublasSetWorkspace(cublas_, workspace_, kCublasWorkspace), "cublasSetWorkspace");
    cuda_check(cudaMallocHost(&host_double_, sizeof(double)), "cudaMallocHost");
    // bf16 GEMMs: cuBLASLt with its own 32 MiB workspace (allocated here, once).
    if (bf16_) lt_ = std::make_unique<kernels::LtGemm>(stream_);
  }

  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);
    for (Staging& st : staging_) {
      if (st.host != nullptr) cudaFreeHost(st.host);
      if (st.done != nullptr) cudaEventDestroy(st.done);
    }
    cnn_.reset();  // before the arena and the stream it uses
    sdpa_.reset();
    lt_.reset();
    if (host_double_ != nullptr) cudaFreeHost(host_double_);
    cublasDestroy(cublas_);
    cudaStreamDestroy(stream_);
    // arena_ frees its chunks (workspace and scratch included) in its destructor.
  }

  std::string name() const override { return "cuda"; }
  void* native_stream() const override { return stream_; }
  std::unique_ptr<OpClock> make_op_clock() override { return std::make_unique<EventClock>(stream_); }
  DType act_dtype() const override { return act_; }

  CudaMemoryStats stats() const { return arena_.stats(); }
  std::string kernel_summary() const override {
    if (!lt_) return {};
    return fmt::format("cuBLASLt: {} heuristic queries, {} cached plans, {} GEMMs whose epilogue (bias, GELU, "
                       "dGELU) ran as a separate kernel instead of fused{}",
                       lt_->heuristic_queries(), lt_->cached_plans(), lt_->fallback_calls(),
                       lt_->fused_epilogues() ? "" : " (fused epilogues switched off)") +
           (sdpa_ ? "; " + sdpa_->summary() : std::string());
  }
  std::string memory_summary() const override {
    const CudaMemoryStats st = arena_.stats();
    size_t free = 0, total = 0;
    cudaMemGetInfo(&free, &total);
    return fmt::format("device memory: peak {:.0f} MiB in use, {:.0f} MiB reserved by the arena "
                       "({} cudaMalloc calls){}; {:.0f} of {:.0f} MiB free on the device",
                       st.peak_in_use_bytes / 1048576.0, st.reserved_bytes / 1048576.0,
                       st.device_mallocs, lt_ ? " + 32 MiB cuBLASLt workspace" : "",
                       free / 1048576.0, total / 1048576.0) +
           (cnn_ ? fmt::format(" (cuDNN buffers: {:.0f} MiB of the arena)", cnn_->buffer_bytes() / 1048576.0)
                 : std::string());
  }

  // ---- memory ----
  // hetero.memory_limit on a GPU rank: a smaller device emulated on this one (what the arena
  // allocates counts), or, when the limit is more than the device has, the device itself.
  void set_memory_limit(const MemoryLimit& limit) override {
    size_t free = 0, total = 0;
    cuda_check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
    MemoryLimit l = limit;
    if (l.bytes > total) {
      log::warn("rank {}: the memory limit {}{} is more than this GPU has ({}): the device's own memory is the limit",
                l.rank, format_bytes(double(l.bytes)), l.device.empty() ? "" : fmt::format(" ({})", l.device),
                format_bytes(double(total)));
      l.bytes = 0;
    }
    BATON_REQUIRE(l.bytes == 0 || arena_.stats().in_use_bytes <= l.bytes,
                  fmt::format("rank {}: {} of device memory are in use already, more than the memory limit {}", l.rank,
                              format_bytes(double(arena_.stats().in_use_bytes)), format_bytes(double(l.bytes))),
                  "raise hetero.memory_limit for this rank");
    arena_.set_limit(l);
  }

  void* alloc(size_t bytes) override {
    void* p = arena_.alloc(bytes);
    // Zero-initialised (contract), ordered before any later op on the stream.
    cuda_check(cudaMemsetAsync(p, 0, std::max<size_t>(bytes, 1), stream_), "alloc memset");
    return p;
  }
  void release(void* p) override {
    // Stream order makes reuse safe: later work on this stream runs after earlier users of p.
    arena_.release(p);
  }
  // Small uploads (a micro-batch's tokens and targets) go through a ring of pinned staging
  // buffers: the host data is copied into one and the transfer is queued without waiting, so a
  // step's micro-batches never stall the stream. A slot is reused once its previous transfer is
  // done (its event). Large uploads (weights at load) copy and synchronise.
  void to_device(void* dst, const void* src_host, size_t bytes) override {
    if (bytes == 0) return;
    if (bytes > kStagingBytes) {
      cuda_check(cudaMemcpyAsync(dst, src_host, bytes, cudaMemcpyHostToDevice, stream_), "to_device");
      cuda_check(cudaStreamSynchronize(stream_), "to_device");
      return;
    }
    Staging& st = staging_[next_staging_++ % staging_.size()];
    if (st.host == nullptr) {
      cuda_check(cudaMallocHost(&st.host, kStagingBytes), "cudaMallocHost (upload staging)");
      cuda_check(cudaEventCreateWithFlags(&st.done, cudaEventDisableTiming), "cudaEventCreate");
    } else {
      cuda_check(cudaEventSynchronize(st.done), "to_device (staging reuse)");
    }
    std::memcpy(st.host, src_host, bytes);
    cuda_check(cudaMemcpyAsync(dst, st.host, bytes, cudaMemcpyHostToDevice, stream_), "to_device");
    cuda_check(cudaEventRecord(st.done, stream_), "to_device");
  }
  void to_host(void* dst_host, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    cuda_check(cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDeviceToHost, stream_), "to_host");
    cuda_check(cudaStreamSynchronize(stream_), "to_host");
  }
  void synchronize() override { cuda_check(cudaStreamSynchronize(stream_), "synchronize"); }

  void zero_bytes(void* x, size_t bytes) override {
    if (bytes) cuda_check(cudaMemsetAsync(x, 0, bytes, stream_), "zero");
  }
  void copy_bytes(void* dst, const void* src, size_t bytes) override {
    if (bytes && dst != src)
      cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "copy");
  }
  void cast(void* dst, DType dt, const void* src, DType st, size_t n) override {
    if (dt == st) return copy_bytes(dst, src, n * dtype_size(dt));
    if (dt == DType::BF16 && st == DType::F32) return kernels::cast_f32_to_bf16(H(dst), CF(src), n, stream_);
    if (dt == DType::F32 && st == DType::BF16) return kernels::cast_bf16_to_f32(F(dst), CH(src), n, stream_);
    BATON_ASSERT(false, "cast {} -> {} is not supported", dtype_name(st), dtype_name(dt));
  }
  void scale(float* x, float s, size_t n) override { kernels::scale(x, s, n, stream_); }
  void add(float* dst, const float* src, size_t n) override { kernels::add(dst, src, n, stream_); }
  void residual_forward(void* out, const void* a, const void* b, size_t n) override {
    if (bf16_) return kernels::residual_forward(H(out), CH(a), CH(b), n, stream_);
    kernels::residual(F(out), CF(a), CF(b), n, stream_);
  }
  void accumulate_sum(double* acc, const float* x, size_t n) override {
    kernels::accumulate_sum(acc, x, n, stream_);
  }
  double sum_squares(const float* x, size_t n) override {
    const size_t nd = kernels::sum_squares_scratch_doubles(n);
    double* scratch = static_cast<double*>(scratch_bytes(nd * sizeof(double)));
    double* result = scratch + nd - 1;
    kernels::sum_squares(result, x, n, scratch, nd, stream_);
    cuda_check(cudaMemcpyAsync(host_double_, result, sizeof(double), cudaMemcpyDeviceToHost, stream_),
               "sum_squares");
    cuda_check(cudaStreamSynchronize(stream_), "sum_squares");
    return *host_double_;
  }

  double sum_squares_spans(const float* x, const std::vector<std::pair<size_t, size_t>>& spans) override {
    if (spans.empty()) return 0;
    // Two launches for all the spans (kernels::sum_squares_spans: the per-span results, the bits of
    // one sum_squares each), one copy back and one synchronisation; the host adds in span order.
    // The span table is uploaded when the list changes (a gradient norm's spans are the same every
    // step), then reused.
    if (spans != sumsq_spans_) {
      std::vector<kernels::SumSqSpan> table(spans.size());
      for (size_t i = 0; i < spans.size(); ++i) table[i] = {spans[i].first, spans[i].second, 0};
      sumsq_chunks_ = kernels::sum_squares_spans_plan(table.data(), table.size());
      upload_table(sumsq_table_, sumsq_table_size_, table.data(), table.size() * sizeof(table[0]));
      sumsq_spans_ = spans;
    }
    double* scratch = static_cast<double*>(scratch_bytes((sumsq_chunks_ + spans.size()) * sizeof(double)));
    double* results = scratch + sumsq_chunks_;
    kernels::sum_squares_spans(results, x, static_cast<const kernels::SumSqSpan*>(sumsq_table_), spans.size(),
                               sumsq_chunks_, scratch, stream_);
    span_sums_.resize(spans.size());
    cuda_check(cudaMemcpyAsync(span_sums_.data(), results, spans.size() * sizeof(double), cudaMemcpyDeviceToHost,
                               stream_),
               "sum_squares_spans");
    cuda_check(cudaStreamSynchronize(stream_), "sum_squares_spans");
    double s = 0;
    for (double v : span_sums_) s += v;
    return s;
  }

  // ---- dense ----
  void matmul_forward(void* out, const void* inp, const void* weight, const void* bias, int N,
                      int C, int OC) override {
    if (bf16_)
      return kernels::matmul_forward_bf16(*lt_, H(out), CH(inp), CH(weight), CH(bias), N, C, OC,
                                          nullptr, stream_);
    kernels::matmul_forward(F(out), CF(inp), CF(weight), CF(bias), N, C, OC, cublas_, stream_);
  }
  // bf16: one cuBLASLt call with the GELU_AUX_BIAS epilogue (pre is the aux output).
  void matmul_gelu_forward(void* pre, void* out, const void* inp, const void* weight,
                           const void* bias, int N, int C, int OC) override {
    if (!bf16_) return Backend::matmul_gelu_forward(pre, out, inp, weight, bias, N, C, OC);
    kernels::matmul_forward_bf16(*lt_, H(pre), CH(inp), CH(weight), CH(bias), N, C, OC, H(out),
                                 stream_);
  }
  void matmul_backward(void* dinp, float* dweight, float* dbias, const void* dout, const void* inp,
                       const void* weight, int N, int C, int OC, bool accumulate_dinp,
                       bool accumulate_dweight) override {
    if (bf16_) return matmul_backward_bf16(dinp, dweight, dbias, dout, inp, weight, nullptr, N, C, OC,
                                           accumulate_dinp, accumulate_dweight);
    const size_t nf = dbias != nullptr ? kernels::matmul_backward_scratch_floats(N, OC) : 0;
    float* scratch = nf > 0 ? static_cast<float*>(scratch_bytes(nf * sizeof(float))) : nullptr;
    kernels::matmul_backward(F(dinp), dweight, dbias, CF(dout), CF(inp), CF(weight), N, C, OC,
                             accumulate_dinp, accumulate_dweight, scratch, nf, cublas_, stream_);
  }
  // bf16: the DGELU epilogue on the dinp GEMM.
  void matmul_backward_gelu(void* dpre, float* dweight, float* dbias, const void* dout,
                            const void* inp, const void* weight, const void* pre, int N, int C,
                            int OC, bool accumulate_dweight) override {
    if (!bf16_)
      return Backend::matmul_backward_gelu(dpre, dweight, dbias, dout, inp, weight, pre, N, C, OC,
                                           accumulate_dweight);
    matmul_backward_bf16(dpre, dweight, dbias, dout, inp, weight, dpre ? pre : nullptr, N, C, OC,
                         false, accumulate_dweight);
  }

  // ---- normalisation ----
  void layernorm_forward(void* out, float* mean, float* rstd, const void* inp, const void* weight,
                         const void* bias, int N, int C) override {
    if (bf16_)
      return kernels::layernorm_forward(H(out), mean, rstd, CH(inp), CH(weight), CH(bias), N, C,
                                        stream_);
    kernels::layernorm_forward(F(out), mean, rstd, CF(inp), CF(weight), CF(bias), N, C, stream_);
  }
  void layernorm_backward(void* dinp, const void* dres, float* dweight, float* dbias, const void* dout,
                          const void* inp, const void* weight, const float* mean, const float* rstd,
                          int N, int C) override {
    const bool params = dweight != nullptr || dbias != nullptr;
    const size_t nf = params ? kernels::layernorm_backward_scratch_floats(N, C) : 0;
    float* scratch = nf > 0 ? static_cast<float*>(scratch_bytes(nf * sizeof(float))) : nullptr;
    if (bf16_)
      return kernels::layernorm_backward(H(dinp), CH(dres), dweight, dbias, CH(dout), CH(inp), CH(weight),
                                         mean, rstd, N, C, scratch, nf, stream_);
    kernels::layernorm_backward(F(dinp), CF(dres), dweight, dbias, CF(dout), CF(inp), CF(weight), mean, rstd,
                                N, C, scratch, nf, stream_);
  }
  void residual_layernorm_forward(void* residual, void* out, float* mean, float* rstd,
                                  const void* a, const void* b, const void* weight,
                                  const void* bias, int N, int C) override {
    if (bf16_)
      return kernels::residual_layernorm_forward(H(residual), H(out), mean, rstd, CH(a), CH(b),
                                                 CH(weight), CH(bias), N, C, stream_);
    kernels::residual_layernorm_forward(F(residual), F(out), mean, rstd, CF(a), CF(b), CF(weight),
                                        CF(bias), N, C, stream_);
  }

  // ---- activations ----
  void gelu_forward(void* out, const void* inp, size_t n) override {
    if (bf16_) return kernels::gelu_forward(H(out), CH(inp), n, stream_);
    kernels::gelu_forward(F(out), CF(inp), n, stream_);
  }
  void gelu_backward(void* dinp, const void* inp, const void* dout, size_t n) override {
    if (bf16_) return kernels::gelu_backward(H(dinp), CH(inp), CH(dout), n, stream_);
    kernels::gelu_backward(F(dinp), CF(inp), CF(dout), n, stream_);
  }

  // ---- attention ----
  // bf16: flash attention (state = logsumexp [B,NH,T]) when the head size is one it handles;
  // otherwise, and in fp32, the materialised fp32 attention (state = probabilities [B,NH,T,T]),
  // in bf16 through fp32 copies of qkv/out/dout.
  bool flash(int C, int NH) const { return bf16_ && kernels::flash_attention_supported(C / NH); }
  // precision.attention (attention_kernel.h): true = cuDNN's fused attention (cudnn_sdpa.h, the
  // flash kernel's state); a kernel named explicitly that cannot run this shape is an Error.
  bool cudnn_attention(int C, int NH) const {
    BATON_REQUIRE(attention_ != AttentionKernel::FLASH || flash(C, NH),
                  fmt::format("precision.attention = \"flash\": the flash kernel has no head size {} (C {} / NH {})",
                              C / NH, C, NH),
                  "use head size 32, 64 or 128, or precision.attention = \"auto\"");
    BATON_REQUIRE(attention_ != AttentionKernel::CUDNN || CudnnSdpa::supported_head_size(C / NH),
                  fmt::format("precision.attention = \"cudnn\": cuDNN's fused attention has no head size {} "
                              "(C {} / NH {}; a multiple of 8 up to 128)", C / NH, C, NH),
                  "use precision.attention = \"auto\", or a d_model / n_head giving such a head size");
    return attention_ == AttentionKernel::CUDNN;
  }
  CudnnSdpa& sdpa() {
    if (!sdpa_) sdpa_ = std::make_unique<CudnnSdpa>(stream_, [this](size_t bytes) { return scratch_bytes(bytes); });
    return *sdpa_;
  }
  size_t attention_state_floats(int B, int T, int C, int NH) const override {
    if (cudnn_attention(C, NH)) return size_t(B) * NH * T;
    return flash(C, NH) ? size_t(B) * NH * T : size_t(B) * NH * T * T;
  }
  void attention_forward(void* out, float* att, const void* qkv, int B, int T, int C,
                         int NH) override {
    if (cudnn_attention(C, NH)) return sdpa().forward(out, att, qkv, B, T, C, NH);
    if (flash(C, NH))
      return kernels::flash_attention_forward(H(out), att, CH(qkv), B, T, C, NH, stream_);
    if (bf16_) {
      const size_t n = size_t(B) * T * C;
      float* q32 = static_cast<float*>(widen_bytes(4 * n * sizeof(float)));
      kernels::cast_bf16_to_f32(q32, CH(qkv), 3 * n, stream_);
      kernels::attention_forward(q32 + 3 * n, att, q32, B, T, C, NH, cublas_, stream_);
      return kernels::cast_f32_to_bf16(H(out), q32 + 3 * n, n, stream_);
    }
    kernels::attention_forward(F(out), att, CF(qkv), B, T, C, NH, cublas_, stream_);
  }
  void attention_backward(void* dqkv, const void* dout, const void* out, const void* qkv,
                          const float* att, int B, int T, int C, int NH) override {
    if (cudnn_attention(C, NH)) return sdpa().backward(dqkv, dout, out, qkv, att, B, T, C, NH);
    if (flash(C, NH)) {
      const size_t nf = kernels::flash_attention_backward_scratch_floats(B, T, C, NH);
      float* scratch = static_cast<float*>(scratch_bytes(std::max<size_t>(nf, 1) * sizeof(float)));
      return kernels::flash_attention_backward(H(dqkv), CH(dout), CH(out), CH(qkv), att, B, T, C,
                                               NH, scratch, nf, stream_);
    }
    if (bf16_) {
      const size_t n = size_t(B) * T * C;
      float* w = static_cast<float*>(widen_bytes(7 * n * sizeof(float)));
      float *q32 = w, *d32 = w + 3 * n, *dq32 = w + 4 * n;
      kernels::cast_bf16_to_f32(q32, CH(qkv), 3 * n, stream_);
      kernels::cast_bf16_to_f32(d32, CH(dout), n, stream_);
      const size_t nf = kernels::attention_backward_scratch_floats(T, NH);
      float* scratch = static_cast<float*>(scratch_bytes(std::max<size_t>(nf, 1) * sizeof(float)));
      kernels::attention_backward(dq32, d32, q32, att, B, T, C, NH, scratch, nf, cublas_, stream_);
      return kernels::cast_f32_to_bf16(H(dqkv), dq32, 3 * n, stream_);
    }
    const size_t nf = kernels::attention_backward_scratch_floats(T, NH);
    float* scratch = static_cast<float*>(scratch_bytes(std::max<size_t>(nf, 1) * sizeof(float)));
    kernels::attention_backward(F(dqkv), CF(dout), CF(qkv), att, B, T, C, NH, scratch, nf, cublas_,
                                stream_);
  }

  // ---- embeddings ----
  void embedding_forward(void* out, const int32_t* tokens, const void* wte, const void* wpe, int B,
                         int T, int C, int vocab_start, int vocab_rows) override {
    if (bf16_)
      return kernels::embedding_forward(H(out), tokens, CH(wte), CH(wpe), B, T, C, vocab_start,
                                        vocab_rows, stream_);
    kernels::embedding_forward(F(out), tokens, CF(wte), CF(wpe), B, T, C, vocab_start, vocab_rows,
                               stream_);
  }
  void embedding_backward(float* dwte, float* dwpe, const void* dout, const int32_t* tokens,
                          const int32_t* tokens_host, int B, int T, int C, int vocab_start,
                          int vocab_rows) override {
    const int N = B * T;
    if (N <= 0) return;
    if (tokens_host == nullptr) {  // the tokens only on the device: copy them back (synchronises)
      host_tokens_.resize(size_t(N));
      to_host(host_tokens_.data(), tokens, size_t(N) * sizeof(int32_t));
      tokens_host = host_tokens_.data();
    }
    const size_t ni = kernels::embedding_backward_scratch_ints(N);
    int32_t* scratch = static_cast<int32_t*>(scratch_bytes(ni * sizeof(int32_t)));
    if (bf16_)
      return kernels::embedding_backward(dwte, dwpe, CH(dout), tokens_host, B, T, C,
                                         vocab_start, vocab_rows, scratch, ni, stream_);
    kernels::embedding_backward(dwte, dwpe, CF(dout), tokens_host, B, T, C, vocab_start,
                                vocab_rows, scratch, ni, stream_);
  }

  // ---- classifier ----
  void softmax_cross_entropy(float* losses, void* dlogits, const void* logits,
                             const int32_t* targets, int N, int V, int Vp, float dloss) override {
    if (bf16_)
      return kernels::softmax_cross_entropy(losses, H(dlogits), CH(logits), targets, N, V, Vp,
                                            dloss, stream_);
    kernels::softmax_cross_entropy(losses, F(dlogits), CF(logits), targets, N, V, Vp, dloss,
                                   stream_);
  }
  void logits_row_max(float* maxv, const void* logits, int N, int V_local, int Vl) override {
    if (bf16_) return kernels::logits_row_max(maxv, CH(logits), N, V_local, Vl, stream_);
    kernels::logits_row_max(maxv, CF(logits), N, V_local, Vl, stream_);
  }
  void logits_sumexp_target(float* sumexp, float* target_logit, const void* logits,
                            const float* maxv, const int32_t* targets, int N, int V_local, int Vl,
                            int vocab_start) override {
    if (bf16_)
      return kernels::logits_sumexp_target(sumexp, target_logit, CH(logits), maxv, targets, N,
                                           V_local, Vl, vocab_start, stream_);
    kernels::logits_sumexp_target(sumexp, target_logit, CF(logits), maxv, targets, N, V_local, Vl,
                                  vocab_start, stream_);
  }
  void cross_entropy_finish(float* losses, void* dlogits, const void* logits, const float* maxv,
                            const float* sumexp, const float* target_logit, const int32_t* targets,
                            int N, int V_local, int Vl, int vocab_start, float dloss) override {
    if (bf16_)
      return kernels::cross_entropy_finish(losses, H(dlogits), CH(logits), maxv, sumexp,
                                           target_logit, targets, N, V_local, Vl, vocab_start,
                                           dloss, stream_);
    kernels::cross_entropy_finish(losses, F(dlogits), CF(logits), maxv, sumexp, target_logit,
                                  targets, N, V_local, Vl, vocab_start, dloss, stream_);
  }

  // ---- convolutional networks: cuDNN (cudnn_ops.h), ReLU and axpby as kernels (kernels/cnn.cu) ----
  void conv2d_forward(void* y, const void* x, const void* w, const void* bias, const Conv2d& c) override {
    cnn().conv2d_forward(y, x, w, bias, c);
  }
  void conv2d_backward(void* dx, float* dw, float* db, const void* dy, const void* x, const void* w,
                       const Conv2d& c) override {
    cnn().conv2d_backward(dx, dw, db, dy, x, w, c);
  }
  void batchnorm_forward(void* y, float* mean, float* var, const void* x, const void* gamma,
                         const void* beta, int N, int C, int HW, float eps, bool training) override {
    cnn().batchnorm_forward(y, mean, var, x, gamma, beta, N, C, HW, eps, training);
  }
  void batchnorm_backward(void* dx, float* dgamma, float* dbeta, const void* dy, const void* x,
                          const float* mean, const float* var, const void* gamma, int N, int C, int HW,
                          float eps) override {
    cnn().batchnorm_backward(dx, dgamma, dbeta, dy, x, mean, var, gamma, N, C, HW, eps);
  }
  size_t pool2d_workspace_bytes(const Pool2d& p) const override { return cudnn_pool2d_workspace_bytes(p, act_); }
  void pool2d_forward(void* y, void* workspace, const void* x, const Pool2d& p) override {
    cnn().pool2d_forward(y, workspace, x, p);
  }
  void pool2d_backward(void* dx, const void* dy, const void* workspace, const Pool2d& p) override {
    cnn().pool2d_backward(dx, dy, workspace, p);
  }
  void relu_forward(void* y, const void* x, size_t n) override {
    if (bf16_) return kernels::relu_forward(H(y), CH(x), n, stream_);
    kernels::relu_forward(F(y), CF(x), n, stream_);
  }
  void relu_backward(void* dx, const void* y, const void* dy, size_t n) override {
    if (bf16_) return kernels::relu_backward(H(dx), CH(y), CH(dy), n, stream_);
    kernels::relu_backward(F(dx), CF(y), CF(dy), n, stream_);
  }
  void axpby(float* y, float a, const float* x, float b, size_t n) override {
    kernels::axpby(y, a, x, b, n, stream_);
  }
  void dropout(void* y, const void* x, int rows, int row_elems, float p, uint64_t seed,
               int64_t first_row) override {
    if (bf16_) return kernels::dropout(H(y), CH(x), rows, row_elems, p, seed, first_row, stream_);
    kernels::dropout(F(y), CF(x), rows, row_elems, p, seed, first_row, stream_);
  }
  void classification_hits(float* hits1, float* hits5, const void* logits, const int32_t* targets, int N, int V,
                           int ld) override {
    if (bf16_) return kernels::classification_hits(hits1, hits5, CH(logits), targets, N, V, ld, stream_);
    kernels::classification_hits(hits1, hits5, CF(logits), targets, N, V, ld, stream_);
  }
  // The cuDNN ops, created at the first CNN op (a GPT never loads cuDNN's libraries).
  CudnnOps& cnn() {
    if (!cnn_)
      cnn_ = std::make_unique<CudnnOps>(
          stream_, act_,
          DeviceMemory{[this](size_t bytes) { return arena_.alloc(bytes); }, [this](void* p) { arena_.release(p); }});
    return *cnn_;
  }

  // ---- optimizer ----
  void sgd_step(float* param, const float* grad, float* buf, size_t n, const SgdArgs& a) override {
    const kernels::SgdParams p{.lr = a.lr, .momentum = a.momentum, .l2 = a.l2, .decoupled = a.decoupled,
                               .grad_scale = a.grad_scale, .nesterov = a.nesterov ? 1 : 0};
    kernels::sgd_step(param, grad, buf, n, p, stream_);
  }
  void adamw_step(float* param, const float* grad, float* m, float* v, size_t n,
                  const AdamWArgs& a) override {
    kernels::adamw_step(param, grad, m, v, n, adamw_params(a), stream_);
  }
  // One launch for every segment (kernels::adamw_step_multi). The segment table is uploaded when
  // the list changes (the optimizer passes the same one every step), then reused.
  void adamw_step_segments(float* params, const float* grads, float* m, float* v,
                           const std::vector<AdamWSegment>& segs, const AdamWArgs& a) override {
    const kernels::AdamWParams p = adamw_params(a);
    if (segs.empty()) return;
    if (segs != adamw_segs_) {
      std::vector<kernels::AdamWTensor> table(segs.size());
      for (size_t i = 0; i < segs.size(); ++i)
        table[i] = {.param_offset = segs[i].flat, .state_offset = segs[i].state, .n = segs[i].n,
                    .weight_decay = segs[i].weight_decay};
      adamw_blocks_ = kernels::adamw_multi_plan(table.data(), table.size());
      upload_table(adamw_table_, adamw_table_size_, table.data(), table.size() * sizeof(table[0]));
      adamw_segs_ = segs;
    }
    kernels::adamw_step_multi(params, grads, m, v, static_cast<const kernels::AdamWTensor*>(adamw_table_),
                              segs.size(), adamw_blocks_, p, stream_);
  }

 private:
  static constexpr size_t kCublasWorkspace = size_t(32) << 20;
  static constexpr size_t kStagingBytes = size_t(1) << 20;  // per upload slot (256k tokens)
  struct Staging {
    void* host = nullptr;  // pinned
    cudaEvent_t done = nullptr;
  };

  static kernels::AdamWParams adamw_params(const AdamWArgs& a) {
    BATON_ASSERT(a.step >= 1, "adamw_step: step must be 1-based, got {}", a.step);
    kernels::AdamWParams p;
    p.lr = a.lr;
    p.beta1 = a.beta1;
    p.beta2 = a.beta2;
    p.eps = a.eps;
    p.weight_decay = a.weight_decay;
    p.grad_scale = a.grad_scale;
    // As the CPU twin: bias corrections in double, rounded to float.
    p.bc1 = float(1.0 - std::pow(double(a.beta1), double(a.step)));
    p.bc2 = float(1.0 - std::pow(double(a.beta2), double(a.step)));
    return p;
  }
  // A kernel's cached table (segments, spans) to device memory of its own (not the op scratch,
  // which the next op reuses); synchronous, so the host table may go at once. Only when the list
  // changes, i.e. at the first step.
  void upload_table(void*& buf, size_t& size, const void* host, size_t bytes) {
    grow(buf, size, bytes);  // the stream orders this after the kernels that read the old table
    cuda_check(cudaMemcpyAsync(buf, host, bytes, cudaMemcpyHostToDevice, stream_), "table upload");
    cuda_check(cudaStreamSynchronize(stream_), "table upload");
  }
  // The op scratch: grows to the largest request (first step), then reused. Safe to hand out to
  // consecutive ops because they are ordered on the one stream.
  void* scratch_bytes(size_t bytes) { return grow(scratch_, scratch_size_, bytes); }
  // A second scratch for fp32 copies of bf16 tensors (an op may need it and scratch_bytes).
  void* widen_bytes(size_t bytes) { return grow(widen_, widen_size_, bytes); }
  void* grow(void*& buf, size_t& size, size_t bytes) {
    if (bytes > size) {
      arena_.release(buf);
      buf = nullptr;
      buf = arena_.alloc(bytes);
      size = bytes;
    }
    return buf;
  }
  void matmul_backward_bf16(void* dinp, float* dweight, float* dbias, const void* dout,
                            const void* inp, const void* weight, const void* dgelu_pre, int N,
                            int C, int OC, bool accumulate_dinp, bool accumulate_dweight) {
    const size_t nf = dbias != nullptr ? kernels::matmul_backward_bf16_scratch_floats(N, OC) : 0;
    float* scratch = nf > 0 ? static_cast<float*>(scratch_bytes(nf * sizeof(float))) : nullptr;
    kernels::matmul_backward_bf16(*lt_, H(dinp), dweight, dbias, CH(dout), CH(inp), CH(weight), N, C,
                                  OC, accumulate_dinp, accumulate_dweight, CH(dgelu_pre), scratch, nf, stream_);
  }

  int device_;
  DType act_;
  bool bf16_;
  AttentionKernel attention_;            // precision.attention
  std::unique_ptr<CudnnSdpa> sdpa_;      // cuDNN's fused attention, from its first call on
  std::unique_ptr<kernels::LtGemm> lt_;  // bf16 GEMMs (cuBLASLt)
  std::unique_ptr<CudnnOps> cnn_;        // the CNN ops (cuDNN), from the first one on
  void* widen_ = nullptr;
  size_t widen_size_ = 0;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  DeviceArena arena_;
  void* workspace_ = nullptr;
  void* scratch_ = nullptr;
  size_t scratch_size_ = 0;
  double* host_double_ = nullptr;
  // adamw_step_segments' and sum_squares_spans' device tables and the lists they were built from.
  std::vector<AdamWSegment> adamw_segs_;
  void* adamw_table_ = nullptr;
  size_t adamw_table_size_ = 0;
  size_t adamw_blocks_ = 0;
  std::vector<std::pair<size_t, size_t>> sumsq_spans_;
  void* sumsq_table_ = nullptr;
  size_t sumsq_table_size_ = 0;
  size_t sumsq_chunks_ = 0;
  std::vector<double> span_sums_;  // sum_squares_spans' per-span results (pageable: read after a sync)
  std::array<Staging, 8> staging_{};  // upload ring (to_device)
  size_t next_staging_ = 0;
  std::vector<int32_t> host_tokens_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device, DType act, AttentionKernel attention) {
  return std::make_unique<CudaBackend>(device, act, attention);
}

namespace {
CudaBackend& as_cuda(Backend& backend, const char* what) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend.unwrapped());
  BATON_REQUIRE(cuda != nullptr, fmt::format("{}: backend \"{}\" is not CUDA", what, backend.name()),
                "call it on a backend from make_cuda_backend()");
  return *cuda;
}
}  // namespace

CudaMemoryStats cuda_memory_stats(Backend& backend) { return as_cuda(backend, "cuda_memory_stats").stats(); }

void set_cuda_cnn_widen_budget(Backend& backend, size_t bytes) {
  as_cuda(backend, "set_cuda_cnn_widen_budget").cnn().set_widen_budget(bytes);
}

}  // namespace baton
