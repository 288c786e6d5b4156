// cuda_emu: runs CUDA kernels on the CPU, so that kernels can be tested without a GPU.
//
// Kernel sources are turned into host C++ by gen_host_kernels.py (which rewrites the CUDA-only
// constructs into the calls below); a test then calls
//   cuda_emu::launch(grid, block, dynamic_smem_bytes, [&] { my_kernel<...>(args...); });
// with host pointers standing for device pointers.
//
// What is modelled:
//   - Every CUDA thread of a block is a std::thread; threadIdx, blockIdx, blockDim and gridDim are
//     thread-local globals. Blocks run one after the other (threads are reused between blocks);
//     warps are 32 consecutive linear thread indices.
//   - __syncthreads(): a barrier of the block; __syncwarp(): a barrier of the warp. A thread that
//     returns from the kernel leaves both barriers (exited threads do not hold up __syncthreads,
//     as on the hardware).
//   - __shfl_sync / __shfl_xor_sync / __shfl_up_sync / __shfl_down_sync with a full mask, through
//     a per-warp exchange buffer between two warp barriers (`width` as documented by CUDA).
//   - mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: the lanes deposit their fragments and
//     each computes its D elements from the fragment layouts of the PTX ISA ("Matrix fragments for
//     mma.m16n8k16 with floating point type"), written here independently of any kernel. The
//     bf16 products are exact in double and summed with C in double, then rounded once to fp32
//     (the hardware adds in fp32 with its own order and truncation: results agree to fp32
//     rounding, not to the bit).
//   - Dynamic shared memory (`extern __shared__ T x[]`): a per-block buffer, 16-byte aligned,
//     filled with 0xFF bytes before the block starts (NaN as float and bf16), so a read of shared
//     memory nobody wrote shows up as NaN in the results; a guard zone after it detects writes past
//     the launch's dynamic size (the launch throws).
// What is not modelled:
//   - Warp divergence and scheduling: threads run freely between barriers (a real warp runs in
//     lockstep or independently per Volta+ scheduling; code that relies on implicit
//     warp-synchronous execution without __syncwarp may pass here and fail there, or the reverse).
//   - The memory model: no detection of data races beyond what the NaN-filled shared memory and
//     the barriers expose (a read racing with a write of the same phase is not reported); no
//     global-memory visibility rules, no atomics, no inter-block concurrency (blocks are
//     sequential).
//   - Partial masks for __syncwarp/shuffles (refused), static __shared__ arrays, other PTX,
//     cp.async, device math precision (exp2f etc. are the host's libm, not the 2-ulp device
//     versions), FMA contraction as nvcc does it, launch limits other than 1024 threads/block.
// A mismatched barrier (a thread that never reaches a __syncthreads the others wait in) hangs, as
// on the hardware; the ctest TIMEOUT turns that into a failure.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>  // dim3, uint3, uint4, make_* (host definitions)

#include <array>
#include <atomic>
#include <barrier>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

// The CUDA built-in variables, per emulated thread.
inline thread_local uint3 threadIdx{};
inline thread_local uint3 blockIdx{};
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;

namespace cuda_emu {

// Test-only fault injection in the mma emulation (negative controls: a test that cannot tell a
// wrong fragment mapping from the right one proves nothing).
enum class MmaFault {
  kNone,
  // Reads A rows g and g+8 from each other's registers (a[0] <-> a[1], a[2] <-> a[3]).
  kSwapARowHalves,
};
inline std::atomic<MmaFault> g_mma_fault{MmaFault::kNone};
// mma instructions emulated since the start of the program (per warp: one per lane).
inline std::atomic<long long> g_mma_lane_count{0};

namespace detail {

constexpr int kWarp = 32;
constexpr size_t kSmemAlign = 16, kSmemGuard = 256;

struct Warp {
  explicit Warp(int n) : size(n), bar(n) {}
  int size;  // 32 unless the block size is not a multiple of 32 (last warp)
  std::barrier<> bar;
  uint64_t xchg[kWarp];                  // shuffles
  std::array<uint32_t, 4> mma_a[kWarp];  // mma fragments
  std::array<uint32_t, 2> mma_b[kWarp];
};

struct Block {
  Block(unsigned nthreads, size_t smem) : bar(nthreads), smem_bytes(smem) {
    for (unsigned w = 0; w * kWarp < nthreads; w++)
      warps.push_back(std::make_unique<Warp>(int(std::min<unsigned>(kWarp, nthreads - w * kWarp))));
    storage.assign(smem + kSmemAlign + kSmemGuard, 0xFF);
  }
  unsigned char* smem() {
    const auto p = reinterpret_cast<uintptr_t>(storage.data());
    return reinterpret_cast<unsigned char*>((p + kSmemAlign - 1) & ~uintptr_t(kSmemAlign - 1));
  }
  bool guard_intact() {
    const unsigned char* g = smem() + smem_bytes;
    for (size_t i = 0; i < kSmemGuard; i++)
      if (g[i] != 0xFF) return false;
    return true;
  }
  std::barrier<> bar;
  std::vector<std::unique_ptr<Warp>> warps;
  std::vector<unsigned char> storage;
  size_t smem_bytes;
};

inline thread_local Block* t_block = nullptr;
inline thread_local unsigned t_tid = 0;  // linear thread index in the block

inline Block& block() {
  if (!t_block) throw std::logic_error("cuda_emu: device code called outside cuda_emu::launch");
  return *t_block;
}
inline Warp& warp() { return *block().warps[t_tid / kWarp]; }
inline unsigned lane() { return t_tid % kWarp; }
inline Warp& full_warp(unsigned mask, const char* what) {
  Warp& w = warp();
  if (mask != 0xffffffffu || w.size != kWarp)
    throw std::logic_error(std::string("cuda_emu: ") + what +
                           " is modelled for full warps and mask 0xffffffff only");
  return w;
}
inline float bf16_half(uint32_t reg, int hi) {  // element 0 in the low 16 bits
  const uint32_t u = hi ? (reg & 0xffff0000u) : (reg << 16);
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

template <class T>
T shuffle(unsigned mask, T var, int src_lane, const char* what) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= sizeof(uint64_t));
  Warp& w = full_warp(mask, what);
  const unsigned me = lane();
  std::memcpy(&w.xchg[me], &var, sizeof(T));
  w.bar.arrive_and_wait();
  T r;
  std::memcpy(&r, &w.xchg[unsigned(src_lane) % kWarp], sizeof(T));
  w.bar.arrive_and_wait();  // everyone has read before the next shuffle writes
  return r;
}

}  // namespace detail

// ---- device-side intrinsics (the generated code calls these) -------------------------------

inline void syncthreads() { detail::block().bar.arrive_and_wait(); }
inline void syncwarp(unsigned mask = 0xffffffffu) {
  detail::full_warp(mask, "__syncwarp").bar.arrive_and_wait();
}

template <class T>
T shfl_sync(unsigned mask, T var, int src_lane, int width = detail::kWarp) {
  const int me = int(detail::lane()), base = me - me % width;
  return detail::shuffle(mask, var, base + src_lane % width, "__shfl_sync");
}
template <class T>
T shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = detail::kWarp) {
  // A source lane in a later group of `width` lanes returns the caller's own value (CUDA docs).
  const int me = int(detail::lane()), src = me ^ lane_mask;
  return detail::shuffle(mask, var, src >= (me / width + 1) * width ? me : src, "__shfl_xor_sync");
}
template <class T>
T shfl_up_sync(unsigned mask, T var, unsigned delta, int width = detail::kWarp) {
  const int me = int(detail::lane()), src = me - int(delta);
  return detail::shuffle(mask, var, src < me - me % width ? me : src, "__shfl_up_sync");
}
template <class T>
T shfl_down_sync(unsigned mask, T var, unsigned delta, int width = detail::kWarp) {
  const int me = int(detail::lane()), src = me + int(delta);
  return detail::shuffle(mask, var, src >= me - me % width + width ? me : src, "__shfl_down_sync");
}

// The launch's dynamic shared memory (extern __shared__ T name[]).
template <class T>
T* dynamic_smem() {
  return reinterpret_cast<T*>(detail::block().smem());
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 d, a, b, c: returns this lane's D fragment.
// Fragments (PTX ISA; g = lane / 4, t = lane % 4; registers hold two bf16, lower index low):
//   A 16x16: a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..], a3 = A[g+8][2t+8..]
//   B 16x8:  b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g]
//   C/D 16x8: c0, c1 = C[g][2t, 2t+1]; c2, c3 = C[g+8][2t, 2t+1]
inline std::array<float, 4> mma_m16n8k16_row_col_f32_bf16_bf16_f32(std::array<float, 4> c,
                                                                   std::array<uint32_t, 4> a,
                                                                   std::array<uint32_t, 2> b) {
  using detail::bf16_half;
  detail::Warp& w = detail::full_warp(0xffffffffu, "mma.sync");
  const unsigned me = detail::lane();
  w.mma_a[me] = a;
  w.mma_b[me] = b;
  w.bar.arrive_and_wait();
  const bool swap_rows = g_mma_fault.load(std::memory_order_relaxed) == MmaFault::kSwapARowHalves;
  auto A = [&](int row, int k) {
    const int ln = (row % 8) * 4 + (k % 8) / 2;
    int reg = (row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
    if (swap_rows) reg ^= 1;
    return double(bf16_half(w.mma_a[ln][reg], k % 2));
  };
  auto B = [&](int k, int col) {
    const int ln = col * 4 + (k % 8) / 2, reg = k >= 8 ? 1 : 0;
    return double(bf16_half(w.mma_b[ln][reg], k % 2));
  };
  const int g = int(me) / 4, t = int(me) % 4;
  std::array<float, 4> d;
  for (int e = 0; e < 4; e++) {
    const int row = g + (e >= 2 ? 8 : 0), col = 2 * t + (e & 1);
    double s = c[e];
    for (int k = 0; k < 16; k++) s += A(row, k) * B(k, col);
    d[e] = float(s);
  }
  w.bar.arrive_and_wait();  // everyone has read the fragments before the next mma writes
  g_mma_lane_count.fetch_add(1, std::memory_order_relaxed);
  return d;
}

// ---- host side -------------------------------------------------------------------------------

// Runs kernel() (a callable that calls the generated kernel with its arguments) once per thread of
// every block of grid. Throws std::runtime_error when a thread threw (the first message) or a block
// wrote past dynamic_smem_bytes of shared memory.
template <class F>
void launch(dim3 grid, dim3 block, size_t dynamic_smem_bytes, F&& kernel) {
  const unsigned nthreads = block.x * block.y * block.z;
  if (nthreads == 0 || nthreads > 1024)
    throw std::invalid_argument("cuda_emu::launch: threads per block must be 1..1024");
  const size_t nblocks = size_t(grid.x) * grid.y * grid.z;
  if (nblocks == 0) return;
  std::mutex err_mu;
  std::string error;
  std::unique_ptr<detail::Block> cur =
      std::make_unique<detail::Block>(nthreads, dynamic_smem_bytes);
  size_t block_no = 0;
  // Between blocks (one thread, all others waiting): check the finished block, set up the next.
  auto next_block = [&]() noexcept {
    if (!cur->guard_intact() && error.empty())
      error = "cuda_emu: block " + std::to_string(block_no) +
              " wrote past its dynamic shared memory (" + std::to_string(dynamic_smem_bytes) +
              " bytes)";
    if (++block_no < nblocks) cur = std::make_unique<detail::Block>(nthreads, dynamic_smem_bytes);
  };
  std::barrier between(std::ptrdiff_t(nthreads), next_block);
  auto body = [&](unsigned tid) {
    blockDim = block;
    gridDim = grid;
    threadIdx = make_uint3(tid % block.x, (tid / block.x) % block.y, tid / (block.x * block.y));
    detail::t_tid = tid;
    for (size_t n = 0; n < nblocks; n++) {
      detail::Block* blk = cur.get();  // set up by next_block before this phase started
      detail::t_block = blk;
      blockIdx = make_uint3(unsigned(n % grid.x), unsigned((n / grid.x) % grid.y),
                            unsigned(n / (size_t(grid.x) * grid.y)));
      try {
        kernel();
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lk(err_mu);
        if (error.empty()) error = e.what();
      } catch (...) {
        std::lock_guard<std::mutex> lk(err_mu);
        if (error.empty()) error = "cuda_emu: unknown exception in a kernel";
      }
      // The thread has exited the kernel: it no longer counts in the block's and warp's barriers.
      blk->warps[tid / detail::kWarp]->bar.arrive_and_drop();
      blk->bar.arrive_and_drop();
      between.arrive_and_wait();
    }
    detail::t_block = nullptr;
  };
  std::vector<std::thread> threads;
  threads.reserve(nthreads);
  for (unsigned t = 0; t < nthreads; t++) threads.emplace_back(body, t);
  for (auto& t : threads) t.join();
  if (!error.empty()) throw std::runtime_error(error);
}

// Scoped fault injection for negative controls.
struct ScopedMmaFault {
  explicit ScopedMmaFault(MmaFault f) : prev(g_mma_fault.exchange(f)) {}
  ~ScopedMmaFault() { g_mma_fault.store(prev); }
  ScopedMmaFault(const ScopedMmaFault&) = delete;
  ScopedMmaFault& operator=(const ScopedMmaFault&) = delete;
  MmaFault prev;
};

}  // namespace cuda_emu
