// cuda_emu: runs CUDA kernels on the CPU, so that kernels can be tested without a GPU.
//
// Kernel sources are turned into host C++ by gen_host_kernels.py (which rewrites the CUDA-only
// constructs into the calls below); a test then calls
//   cuda_emu::launch(grid, block, dynamic_smem_bytes, [&] { my_kernel<...>(args...); });
// with host pointers standing for device pointers. A whole .cu with its launchers (--whole) has
// each `k<<<grid, block, smem, stream>>>(args)` rewritten into
//   cuda_emu::launch_kernel(k, grid, block, smem, stream, args...);
// which checks the launch configuration as the CUDA runtime does (the error is then returned by
// cudaGetLastError, see cuda_emu_runtime.cpp for the runtime shim and its device limits).
//
// What is modelled:
//   - Every CUDA thread of a block is a fiber (its own stack) on the launching host
//     thread; threadIdx, blockIdx, blockDim and gridDim are thread-locals that the scheduler sets
//     for the fiber it resumes. Blocks run one after the other; warps are 32 consecutive linear
//     thread indices.
//   - Scheduling is deterministic and adversarial: a fiber runs until it waits at a barrier (or
//     exits), then the lowest-numbered runnable thread runs next in even blocks and the
//     highest-numbered in odd ones. So one warp runs ahead of the others up to the next
//     __syncthreads (and its lane 0 or 31 ahead of the other lanes up to the next warp barrier) -
//     schedules the hardware may pick - and a missing barrier shows up as a read of a value not
//     yet written (NaN-filled shared memory) or already overwritten. BATON_EMU_ORDER=forward,
//     reverse or alternate (default) picks the policy for every block.
//   - __syncthreads(): a barrier of the block; __syncwarp(): a barrier of the warp. A thread that
//     returns from the kernel leaves both barriers (exited threads do not hold up __syncthreads,
//     as on the hardware). A barrier that can never complete (threads waiting at different
//     barriers, or at one the others exited without reaching) fails the launch ("deadlock")
//     instead of hanging as the hardware would.
//   - __shfl_sync / __shfl_xor_sync / __shfl_up_sync / __shfl_down_sync with a full mask, through
//     a per-warp exchange buffer between two warp barriers (`width` as documented by CUDA).
//   - mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: the lanes deposit their fragments and
//     each computes its D elements from the fragment layouts of the PTX ISA ("Matrix fragments for
//     mma.m16n8k16 with floating point type"), written here independently of any kernel. The
//     bf16 products are exact in double and summed with C in double, then rounded once to fp32
//     (the hardware adds in fp32 with its own order and truncation: results agree to fp32
//     rounding, not to the bit).
//   - ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}.shared.b16 (PTX ISA "Warp-level matrix load
//     instruction: ldmatrix"): the lanes deposit their row addresses, each computes its registers
//     from the ISA's fragment layout; addresses are checked (16-byte aligned, inside the block's
//     shared memory) and the bank conflicts of every 8-row phase are counted
//     (g_ldmatrix_conflict_wavefronts: extra wavefronts; 0 for a conflict-free layout). Shared
//     addresses come from __cvta_generic_to_shared (cvta_generic_to_shared: the dynamic buffer at
//     0.., as on the device, so the banks are the device's).
//   - cp.async.{ca,cg}.shared.global (with src-size zero fill), cp.async.commit_group,
//     cp.async.wait_group N, cp.async.wait_all, per thread: the destination is poisoned (NaN) when
//     the copy is issued and written only at the wait that covers its group, the latest moment the
//     ISA allows, so a read before the wait (or before the barrier publishing other threads'
//     copies) sees NaN; a thread that exits with copies it never waited for fails the launch.
//   - Dynamic shared memory (`extern __shared__ T x[]`): a per-block buffer, 16-byte aligned,
//     filled with 0xFF bytes before the block starts (NaN as float and bf16), so a read of shared
//     memory nobody wrote shows up as NaN in the results; a guard zone after it detects writes past
//     the launch's dynamic size (the launch throws).
//   - Static shared memory (`__shared__ T x[..]` in a kernel or device function): one instance per
//     declaration per block, shared by the block's threads (static_smem: the block's arena keyed
//     by the declaration), 0xFF-filled and guarded like the dynamic buffer; at most 48 KiB per
//     block, and static + dynamic at most the opt-in limit (227 KiB) as on an H100.
//   - launch_kernel: CUDA's launch checks (block <= 1024 threads and (1024, 1024, 64), grid y/z <=
//     65535, nothing zero; dynamic shared memory above 48 KiB only after cudaFuncSetAttribute(k,
//     cudaFuncAttributeMaxDynamicSharedMemorySize, n >= it)), the arguments converted once to the
//     kernel's parameter types; __launch_bounds__(n) kernels refuse blocks of more than n threads.
//   - Device math: min/max (CUDA's overloads, fminf/fmaxf for floating point), __ldg (a plain
//     load), rsqrtf. The fast-math intrinsics (__expf, __logf, __powf, __sinf, __fdividef, ...)
//     are mapped by the generator to the PRECISE host functions (expf, logf, ...): the emulator is
//     not bit-exact for them (nor for expf, exp2f, tanhf, ... themselves: host libm, not the
//     device's ulp bounds). The kernels are built without fast math, so this concerns only
//     explicit intrinsics.
// What is not modelled:
//   - Lockstep warps: lanes run one at a time between warp barriers, so code that relies on
//     implicit warp-synchronous execution without __syncwarp fails here (as it may on Volta+).
//   - The memory model: races are exposed only through the two schedules above (no detection of
//     a read racing with a write of the same phase as such); no global-memory visibility rules,
//     no atomics, no inter-block concurrency (blocks are sequential).
//   - Partial masks for __syncwarp/shuffles (refused), other PTX (cp.async.bulk, TMA, stmatrix,
//     ldmatrix of other shapes), atomics (refused by the generator: the kernels have none by
//     design), bank conflicts of anything but ldmatrix, device math precision (see above), FMA
//     contraction as nvcc does it, register limits, streams and asynchrony (every launch and copy
//     completes before it returns, so a host-side race with the device cannot show here).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>  // dim3, uint3, uint4, make_* (host definitions)

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <sys/mman.h>
#if defined(__SANITIZE_ADDRESS__)
#include <pthread.h>
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

// The CUDA built-in variables, per emulated thread.
inline thread_local uint3 threadIdx{};
inline thread_local uint3 blockIdx{};
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;

// CUDA's min/max for device code (math_functions.hpp declares them only for nvcc): integers in
// their common type (CUDA's mixed signed/unsigned overloads return the unsigned type, as here),
// floating point through fmin/fmax (a NaN operand yields the other one, as fminf/fmaxf).
template <class A, class B,
          std::enable_if_t<std::is_arithmetic_v<A> && std::is_arithmetic_v<B>, int> = 0>
inline std::common_type_t<A, B> min(A a, B b) {
  using C = std::common_type_t<A, B>;
  if constexpr (std::is_floating_point_v<C>)
    return std::fmin(C(a), C(b));
  else
    return C(b) < C(a) ? C(b) : C(a);
}
template <class A, class B,
          std::enable_if_t<std::is_arithmetic_v<A> && std::is_arithmetic_v<B>, int> = 0>
inline std::common_type_t<A, B> max(A a, B b) {
  using C = std::common_type_t<A, B>;
  if constexpr (std::is_floating_point_v<C>)
    return std::fmax(C(a), C(b));
  else
    return C(a) < C(b) ? C(b) : C(a);
}

// cuda_runtime.h's C++ overload taking the kernel itself exists only under nvcc.
template <class... P>
inline cudaError_t cudaFuncSetAttribute(void (*kernel)(P...), cudaFuncAttribute attr, int value) {
  return ::cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), attr, value);
}

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
// Shared memory per block (H100, as cuda_emu_runtime.cpp reports): static at most 48 KiB; dynamic
// above 48 KiB only after the kernel opted in; static + dynamic at most the opt-in limit.
constexpr size_t kSmemDefault = 48 * 1024, kSmemOptin = 227 * 1024;

// A barrier of the cooperative threads: `expected` members have not exited, `arrived` of them
// wait in the current phase (`gen`), `waiters` are their thread numbers.
struct Barrier {
  explicit Barrier(int n) : expected(n) {}
  int expected, arrived = 0;
  uint64_t gen = 0;
  std::vector<unsigned> waiters;
};

struct Warp {
  explicit Warp(int n) : size(n), bar(n) {}
  int size;  // 32 unless the block size is not a multiple of 32 (last warp)
  Barrier bar;
  uint64_t xchg[kWarp];                  // shuffles
  std::array<uint32_t, 4> mma_a[kWarp];  // mma fragments
  std::array<uint32_t, 2> mma_b[kWarp];
  uint32_t ldm_addr[kWarp];  // ldmatrix: the row address each lane supplies
  int ldm_kind[kWarp];       // ldmatrix: .num and .trans of each lane's instruction
};

// cp.async copies of one thread (PTX ISA, "Data Movement and Conversion Instructions: cp.async"):
// issued but not yet committed (`open`), and the committed groups, oldest first.
struct AsyncCopy {
  unsigned char* dst;
  const unsigned char* src;
  int size, src_size;  // bytes copied from src; the rest of size is zero-filled
};
struct AsyncState {
  std::vector<AsyncCopy> open;
  std::vector<std::vector<AsyncCopy>> groups;
};

struct Block {
  Block(unsigned nthreads, size_t smem) : bar(int(nthreads)), smem_bytes(smem) {
    for (unsigned w = 0; w * kWarp < nthreads; w++)
      warps.push_back(std::make_unique<Warp>(int(std::min<unsigned>(kWarp, nthreads - w * kWarp))));
    storage.assign(smem + kSmemAlign + kSmemGuard, 0xFF);
    async.resize(nthreads);
  }
  unsigned char* smem() {
    const auto p = reinterpret_cast<uintptr_t>(storage.data());
    return reinterpret_cast<unsigned char*>((p + kSmemAlign - 1) & ~uintptr_t(kSmemAlign - 1));
  }
  static bool guard_ok(const unsigned char* g) {
    for (size_t i = 0; i < kSmemGuard; i++)
      if (g[i] != 0xFF) return false;
    return true;
  }
  // Empty when intact, else what was overrun.
  std::string overrun() {
    if (!guard_ok(smem() + smem_bytes))
      return "its dynamic shared memory (" + std::to_string(smem_bytes) + " bytes)";
    for (const StaticVar& v : statics)
      if (!guard_ok(v.p + v.bytes))
        return "a static __shared__ variable (" + std::to_string(v.bytes) + " bytes)";
    return {};
  }
  Barrier bar;
  std::vector<std::unique_ptr<Warp>> warps;
  std::vector<unsigned char> storage;
  size_t smem_bytes;
  // Static __shared__ variables of this block, one per declaration (key: the declaration's tag).
  struct StaticVar {
    const void* key;
    unsigned char* p;
    size_t bytes;
    std::unique_ptr<unsigned char[]> mem;
  };
  std::vector<StaticVar> statics;
  size_t static_bytes = 0;
  std::vector<AsyncState> async;  // per thread
  // Empty when every thread waited for all its cp.async copies, else who did not.
  std::string unwaited_copies() const {
    for (size_t t = 0; t < async.size(); t++)
      if (!async[t].open.empty() || !async[t].groups.empty())
        return "thread " + std::to_string(t) + " exited with cp.async copies it never waited for "
               "(cp.async.commit_group + cp.async.wait_group 0, or wait_all, before the end)";
    return {};
  }
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

// ---- the threads of a block as fibers, and their scheduler --------------------------------------

constexpr size_t kStackBytes = 256 * 1024, kStackGuard = 4096;

// A fiber switch saves the callee-saved registers on the running stack and loads another stack.
// glibc's swapcontext also saves and restores the signal mask, a system call per switch: 85% of
// an emulated model test's time went there. x86-64 has its own switch; other machines fall back
// to ucontext.
#if defined(__x86_64__)
extern "C" void cuda_emu_switch(void** save_sp, void* load_sp);
// cuda_emu_switch(save_sp, load_sp): pushes the System V callee-saved registers and
// the SSE/x87 control words, stores the stack pointer in *save_sp, switches to load_sp and pops
// the same frame from there. No signal mask (swapcontext's system call). Weak: every translation
// unit that includes this header defines it, the linker keeps one.
asm(R"(
  .pushsection .text
  .weak cuda_emu_switch
  .type cuda_emu_switch, @function
cuda_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size cuda_emu_switch, .-cuda_emu_switch
  .popsection
)");
using FiberContext = void*;  // the saved stack pointer
#else
using FiberContext = ucontext_t;
#endif

struct Fiber {
  FiberContext ctx{};
  unsigned char* stack = nullptr;  // kStackGuard inaccessible bytes, then kStackBytes of stack
  const char* wait_what = nullptr;
  bool done = true;
};

enum class Order { kAlternate, kForward, kReverse };
inline Order order_from_env() {
  static const Order order = [] {
    const char* e = std::getenv("BATON_EMU_ORDER");
    const std::string v = e ? e : "";
    if (v.empty() || v == "alternate") return Order::kAlternate;
    if (v == "forward") return Order::kForward;
    if (v == "reverse") return Order::kReverse;
    throw std::invalid_argument("BATON_EMU_ORDER must be forward, reverse or alternate, not " + v);
  }();
  return order;
}

class Scheduler;
inline thread_local Scheduler* t_sched = nullptr;

// Runs the threads of one block at a time as fibers on the calling thread. A fiber runs until it
// waits at a barrier or exits; the next one is the lowest (or, `reverse`, highest) numbered
// runnable thread.
class Scheduler {
 public:
  Scheduler() = default;
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;
  ~Scheduler() {
    for (auto& f : fibers_) munmap(f->stack, kStackGuard + kStackBytes);
  }
  bool running() const { return running_; }

  // Runs body(arg) as threads 0..nthreads-1 of blk until every one has exited or none can go on.
  // Returns "" or the first error: a thread's exception, or a deadlock.
  std::string run_block(Block& blk, unsigned nthreads, bool reverse, void (*body)(void*), void* arg) {
    grow(nthreads);
#if defined(__SANITIZE_ADDRESS__)
    if (!host_stack_bottom_) {  // this (host) thread's stack, where the fibers switch back to
      pthread_attr_t attr;
      if (pthread_getattr_np(pthread_self(), &attr) == 0) {
        pthread_attr_getstack(&attr, &host_stack_bottom_, &host_stack_size_);
        pthread_attr_destroy(&attr);
      }
    }
#endif
    block_ = &blk;
    reverse_ = reverse;
    body_ = body;
    arg_ = arg;
    error_.clear();
    ready_.assign((nthreads + 63) / 64, 0);
    for (unsigned t = 0; t < nthreads; t++) {
      Fiber& f = *fibers_[t];
      f.done = false;
      f.wait_what = nullptr;
      start_context(f);
      set_ready(t, true);
    }
    Scheduler* const outer = t_sched;
    t_sched = this;
    running_ = true;
    for (int next; (next = pick()) >= 0;) resume(&host_, unsigned(next), false);
    running_ = false;
    t_sched = outer;
    if (error_.empty()) {
      unsigned stuck = 0, first = 0;
      for (unsigned t = 0; t < nthreads; t++)
        if (!fibers_[t]->done && stuck++ == 0) first = t;
      if (stuck > 0)
        error_ = "cuda_emu: deadlock: " + std::to_string(stuck) + " threads wait forever (thread " +
                 std::to_string(first) + " at " + fibers_[first]->wait_what +
                 "): the others exited or wait at another barrier";
    }
    return error_;
  }

  // The running thread waits at `bar` until every member that has not exited arrived.
  void wait(Barrier& bar, const char* what) {
    bar.arrived++;
    if (bar.arrived == bar.expected) {
      complete(bar);
    } else {
      fibers_[cur_]->wait_what = what;
      set_ready(cur_, false);
      bar.waiters.push_back(cur_);
    }
    yield();
  }

 private:
  static void entry() {
#if defined(__SANITIZE_ADDRESS__)
    __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);  // a fresh fiber: no jump returns
#endif
    Scheduler& s = *t_sched;
    const unsigned me = s.cur_;
    try {
      s.body_(s.arg_);
    } catch (const std::exception& e) {
      s.fail(me, e.what());
    } catch (...) {
      s.fail(me, "unknown exception");
    }
    s.exit_thread(me);
  }
  void fail(unsigned me, const std::string& what) {
    if (error_.empty()) error_ = "thread " + std::to_string(me) + ": " + what;
  }
  // The thread has returned from the kernel: it leaves its warp's and block's barriers.
  void exit_thread(unsigned me) {
    fibers_[me]->done = true;
    set_ready(me, false);
    drop(block_->warps[me / kWarp]->bar);
    drop(block_->bar);
    const int next = pick();
    FiberContext* dead = &fibers_[me]->ctx;  // never resumed: run_block restarts it
    if (next < 0) {
      jump(dead, kHost, true);  // does not return
    }
    resume(dead, unsigned(next), true);
  }
  void drop(Barrier& b) {
    b.expected--;
    if (b.arrived > 0 && b.arrived == b.expected) complete(b);
  }
  void complete(Barrier& b) {
    b.arrived = 0;
    b.gen++;
    for (unsigned t : b.waiters) set_ready(t, true);
    b.waiters.clear();
  }
  void yield() {
    const int next = pick();
    if (next == int(cur_)) return;
    if (next < 0) {
      jump(&fibers_[cur_]->ctx, kHost, false);  // deadlock: the host reports it
      return;
    }
    resume(&fibers_[cur_]->ctx, unsigned(next), false);
  }
  void resume(FiberContext* from, unsigned next, bool from_exits) {
    cur_ = next;
    set_thread(next);
    jump(from, next, from_exits);
  }
  static constexpr unsigned kHost = ~0u;
  // Saves the running context in *from and continues thread `to`'s (or the host's, kHost).
  // Under AddressSanitizer every switch is announced (sanitizer/common_interface_defs.h's fiber
  // API), so that ASan knows which stack runs: without it an exception thrown on a fiber stack
  // makes ASan clear the wrong range, and reports name the wrong stack. `from_exits`: the running
  // fiber is never resumed (ASan drops its fake stack).
  void jump(FiberContext* from, unsigned to, bool from_exits) {
    FiberContext* target = to == kHost ? &host_ : &fibers_[to]->ctx;
#if defined(__SANITIZE_ADDRESS__)
    void* fake_stack = nullptr;
    if (to == kHost)
      __sanitizer_start_switch_fiber(from_exits ? nullptr : &fake_stack, host_stack_bottom_,
                                     host_stack_size_);
    else
      __sanitizer_start_switch_fiber(from_exits ? nullptr : &fake_stack,
                                     fibers_[to]->stack + kStackGuard, kStackBytes);
#else
    (void)from_exits;
#endif
#if defined(__x86_64__)
    cuda_emu_switch(from, *target);
#else
    swapcontext(from, target);
#endif
#if defined(__SANITIZE_ADDRESS__)
    __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#endif
  }
  // A fresh context that runs entry() on f's stack when first jumped to.
  static void start_context(Fiber& f) {
#if defined(__SANITIZE_ADDRESS__)
    // A fiber that never returned (deadlock, or exit through jump) left its frames' redzones
    // poisoned: the restarted fiber's frames are new.
    ASAN_UNPOISON_MEMORY_REGION(f.stack + kStackGuard, kStackBytes);
#endif
#if defined(__x86_64__)
    // The frame cuda_emu_switch pops: MXCSR and x87 control word (this thread's), r15, r14, r13,
    // r12, rbx, rbp, the return address (entry), then a null slot standing for entry's own return
    // address, so entry starts with the stack aligned as after a call (rsp = 8 mod 16).
    auto* top = reinterpret_cast<uint64_t*>(f.stack + kStackGuard + kStackBytes);
    uint64_t* sp = top - 9;
    uint32_t mxcsr;
    uint16_t fpucw;
    asm volatile("stmxcsr %0" : "=m"(mxcsr));
    asm volatile("fnstcw %0" : "=m"(fpucw));
    sp[0] = uint64_t(mxcsr) | uint64_t(fpucw) << 32;
    for (int r = 1; r <= 6; r++) sp[r] = 0;
    sp[7] = reinterpret_cast<uint64_t>(&Scheduler::entry);
    sp[8] = 0;
    f.ctx = sp;
#else
    f.ctx.uc_stack.ss_sp = f.stack + kStackGuard;
    f.ctx.uc_stack.ss_size = kStackBytes;
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, &Scheduler::entry, 0);
#endif
  }
  static void set_thread(unsigned t) {
    t_tid = t;
    threadIdx = make_uint3(t % blockDim.x, (t / blockDim.x) % blockDim.y,
                           t / (blockDim.x * blockDim.y));
  }
  void set_ready(unsigned t, bool on) {
    if (on)
      ready_[t / 64] |= uint64_t(1) << (t % 64);
    else
      ready_[t / 64] &= ~(uint64_t(1) << (t % 64));
  }
  int pick() const {
    if (!reverse_) {
      for (size_t w = 0; w < ready_.size(); w++)
        if (ready_[w]) return int(w * 64 + unsigned(__builtin_ctzll(ready_[w])));
    } else {
      for (size_t w = ready_.size(); w-- > 0;)
        if (ready_[w]) return int(w * 64 + 63 - unsigned(__builtin_clzll(ready_[w])));
    }
    return -1;
  }
#if !defined(__x86_64__)
  // getcontext returns twice (GCC then warns about the variables live across it): kept apart.
  [[gnu::noinline]] static bool init_context(ucontext_t* ctx) { return getcontext(ctx) == 0; }
#endif
  void grow(unsigned n) {
    while (fibers_.size() < n) {
      auto f = std::make_unique<Fiber>();
      void* p = mmap(nullptr, kStackGuard + kStackBytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) throw std::runtime_error("cuda_emu: cannot map a fiber stack");
      f->stack = static_cast<unsigned char*>(p);
      mprotect(f->stack, kStackGuard, PROT_NONE);  // a stack overflow faults instead of corrupting
#if !defined(__x86_64__)
      if (!init_context(&f->ctx)) throw std::runtime_error("cuda_emu: getcontext failed");
#endif
      fibers_.push_back(std::move(f));
    }
  }

  std::vector<std::unique_ptr<Fiber>> fibers_;
  std::vector<uint64_t> ready_;  // bit t: thread t can run
  FiberContext host_{};
#if defined(__SANITIZE_ADDRESS__)
  void* host_stack_bottom_ = nullptr;
  size_t host_stack_size_ = 0;
#endif
  Block* block_ = nullptr;
  unsigned cur_ = 0;
  bool reverse_ = false, running_ = false;
  void (*body_)(void*) = nullptr;
  void* arg_ = nullptr;
  std::string error_;
};

inline Scheduler& scheduler() {
  static thread_local Scheduler s;
  return s;
}
// The barrier wait of device code.
inline void wait(Barrier& bar, const char* what) {
  if (!t_sched || !t_sched->running())
    throw std::logic_error("cuda_emu: device code called outside cuda_emu::launch");
  t_sched->wait(bar, what);
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
  wait(w.bar, what);
  T r;
  std::memcpy(&r, &w.xchg[unsigned(src_lane) % kWarp], sizeof(T));
  wait(w.bar, what);  // everyone has read before the next shuffle writes
  return r;
}

}  // namespace detail

// ---- device-side intrinsics (the generated code calls these) -------------------------------

inline void syncthreads() { detail::wait(detail::block().bar, "__syncthreads"); }
inline void syncwarp(unsigned mask = 0xffffffffu) {
  detail::wait(detail::full_warp(mask, "__syncwarp").bar, "__syncwarp");
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

// A static `__shared__ T name;` (T may be an array type) of the running block: the generator turns
// the declaration into `T& name = static_smem<T, align>(&tag)` with a tag unique to the
// declaration, so every thread of a block gets the same instance and every block its own.
template <class T, size_t Align = alignof(T)>
T& static_smem(const void* key) {
  static_assert(std::is_trivially_copyable_v<std::remove_all_extents_t<T>>,
                "cuda_emu: __shared__ variables must be of trivially copyable types");
  detail::Block& b = detail::block();
  for (const auto& v : b.statics)
    if (v.key == key) return *reinterpret_cast<T*>(v.p);
  const size_t align = std::max(Align, detail::kSmemAlign);
  b.static_bytes += (sizeof(T) + align - 1) / align * align;
  if (b.static_bytes > detail::kSmemDefault)
    throw std::runtime_error("cuda_emu: static __shared__ memory of the block exceeds 48 KiB (" +
                             std::to_string(b.static_bytes) + " bytes)");
  if (b.static_bytes + b.smem_bytes > detail::kSmemOptin)
    throw std::runtime_error("cuda_emu: static + dynamic shared memory exceeds 227 KiB");
  auto mem = std::make_unique<unsigned char[]>(sizeof(T) + align + detail::kSmemGuard);
  std::memset(mem.get(), 0xFF, sizeof(T) + align + detail::kSmemGuard);
  const auto a = reinterpret_cast<uintptr_t>(mem.get());
  auto* p = reinterpret_cast<unsigned char*>((a + align - 1) & ~uintptr_t(align - 1));
  b.statics.push_back({key, p, sizeof(T), std::move(mem)});
  return *reinterpret_cast<T*>(p);
}

// __launch_bounds__(max_threads, ...): the generator calls this first in the kernel's body. A
// launch with more threads per block fails on the device (too many resources requested).
inline void launch_bounds(long long max_threads) {
  const long long n = (long long)blockDim.x * blockDim.y * blockDim.z;
  if (n > max_threads)
    throw std::runtime_error("cuda_emu: launch of " + std::to_string(n) +
                             " threads per block exceeds the kernel's __launch_bounds__(" +
                             std::to_string(max_threads) +
                             ") (CUDA: cudaErrorLaunchOutOfResources)");
}

// Device math without a host definition under that name (the generator renames the calls).
// Fast-math intrinsics become the precise operations: not bit-exact to the device's versions.
template <class T>
T ldg(const T* p) {  // __ldg and the cache-hinted loads: a plain load
  return *p;
}
template <class T>
void st(T* p, T v) {  // __stcg, __stcs, __stwb, __stwt: a plain store
  *p = v;
}
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float fdividef(float a, float b) { return a / b; }
inline float saturatef(float x) { return x != x ? 0.0f : std::min(std::max(x, 0.0f), 1.0f); }
inline float frcp_rn(float x) { return 1.0f / x; }
inline float fadd_rn(float a, float b) { return a + b; }
inline float fsub_rn(float a, float b) { return a - b; }
inline float fmul_rn(float a, float b) { return a * b; }
inline float fdiv_rn(float a, float b) { return a / b; }

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
  detail::wait(w.bar, "mma.sync");
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
  detail::wait(w.bar, "mma.sync");  // everyone has read the fragments before the next mma writes
  g_mma_lane_count.fetch_add(1, std::memory_order_relaxed);
  return d;
}

// ---- shared-memory addresses, ldmatrix, cp.async ---------------------------------------------

// __cvta_generic_to_shared(p): the 32-bit shared-window address of a pointer into the block's
// shared memory (what ldmatrix and cp.async take as their .shared operand). The emulator's window
// puts the dynamic shared memory at 0.. (as on the device for a kernel without static shared
// memory, so that bank = (address / 4) % 32 is the device's) and the k-th static __shared__
// variable of the block at (k + 1) << 24. Anything else is refused.
inline size_t cvta_generic_to_shared(const void* p) {
  detail::Block& b = detail::block();
  const auto* c = static_cast<const unsigned char*>(p);
  if (c >= b.smem() && c <= b.smem() + b.smem_bytes) return size_t(c - b.smem());
  for (size_t k = 0; k < b.statics.size(); k++)
    if (c >= b.statics[k].p && c <= b.statics[k].p + b.statics[k].bytes)
      return ((k + 1) << 24) | size_t(c - b.statics[k].p);
  throw std::logic_error(
      "cuda_emu: __cvta_generic_to_shared of a pointer outside the block's shared memory");
}

namespace detail {
// The bytes [addr, addr + bytes) of the shared window (see cvta_generic_to_shared), checked.
inline unsigned char* shared_at(uint32_t addr, size_t bytes, const char* what) {
  Block& b = block();
  const uint32_t region = addr >> 24, off = addr & 0xFFFFFFu;
  unsigned char* base = nullptr;
  size_t size = 0;
  if (region == 0) {
    base = b.smem();
    size = b.smem_bytes;
  } else if (region - 1 < b.statics.size()) {
    base = b.statics[region - 1].p;
    size = b.statics[region - 1].bytes;
  }
  if (base == nullptr || size_t(off) + bytes > size)
    throw std::runtime_error(std::string("cuda_emu: ") + what + " at shared address " +
                             std::to_string(addr) + " (" + std::to_string(bytes) +
                             " bytes) is outside the block's shared memory");
  return base + off;
}
// The wavefronts one 8-row phase of 16-byte shared-memory rows costs: the largest number of
// distinct 4-byte words any of the 32 banks must deliver (1 when conflict-free; the same word
// requested twice is a broadcast, not a conflict).
inline int phase_wavefronts(const uint32_t* rows, int n) {
  uint32_t words[32];
  int nw = 0, worst = 1;
  for (int r = 0; r < n; r++)
    for (uint32_t k = 0; k < 4; k++) {
      const uint32_t wd = rows[r] / 4 + k;
      bool dup = false;
      for (int i = 0; i < nw && !dup; i++) dup = words[i] == wd;
      if (!dup) words[nw++] = wd;
    }
  for (int i = 0; i < nw; i++) {
    int same_bank = 0;
    for (int k = 0; k < nw; k++) same_bank += words[k] % 32 == words[i] % 32;
    worst = std::max(worst, same_bank);
  }
  return worst;
}
}  // namespace detail

// Test-only fault injection in ldmatrix (negative controls).
enum class LdmatrixFault {
  kNone,
  kIgnoreTrans,  // .trans loads as without it
};
inline std::atomic<LdmatrixFault> g_ldmatrix_fault{LdmatrixFault::kNone};
// ldmatrix statistics since the start of the program, counted once per warp-level instruction:
// the 8x8 matrices loaded (one shared-memory phase of 8 rows of 16 bytes each) and the extra
// wavefronts their bank conflicts cost (0 for a conflict-free layout, 7 per matrix whose 8 rows
// all start in the same bank).
inline std::atomic<long long> g_ldmatrix_matrices{0};
inline std::atomic<long long> g_ldmatrix_conflict_wavefronts{0};

// ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}.shared.b16 r, [addr] (PTX ISA 9.7.14.5.15,
// "Warp-level matrix load instruction: ldmatrix"), written from the ISA independently of any
// kernel: lanes 8q..8q+7 supply the addresses of rows 0..7 of matrix q (16 bytes each, 16-byte
// aligned; lanes past 8 * Num are ignored); every lane receives one .b32 register per matrix
// holding two b16 elements, lower column in the low half:
//   without .trans  r[q] = M_q[g][2t], M_q[g][2t + 1]      (g = lane / 4, t = lane % 4)
//   with .trans     r[q] = M_q[2t][g], M_q[2t + 1][g]      (M_q loaded column-major)
// i.e. the mma A/B fragment layout. The lanes must execute the same instruction (.aligned).
template <int Num, bool Trans>
std::array<uint32_t, Num> ldmatrix_m8n8_b16(uint32_t addr) {
  static_assert(Num == 1 || Num == 2 || Num == 4, "ldmatrix .num is .x1, .x2 or .x4");
  detail::Warp& w = detail::full_warp(0xffffffffu, "ldmatrix");
  const unsigned me = detail::lane();
  w.ldm_addr[me] = addr;
  w.ldm_kind[me] = 2 * Num + (Trans ? 1 : 0);
  detail::wait(w.bar, "ldmatrix");
  for (int k = 0; k < detail::kWarp; k++)
    if (w.ldm_kind[k] != w.ldm_kind[me])
      throw std::logic_error("cuda_emu: the lanes of a warp executed different ldmatrix "
                             "instructions (.aligned requires the same one)");
  const unsigned char* row[8 * Num];
  for (int k = 0; k < 8 * Num; k++) {
    if (w.ldm_addr[k] % 16 != 0)
      throw std::runtime_error("cuda_emu: ldmatrix row address " + std::to_string(w.ldm_addr[k]) +
                               " (lane " + std::to_string(k) + ") is not 16-byte aligned");
    row[k] = detail::shared_at(w.ldm_addr[k], 16, "ldmatrix");
  }
  if (me == 0) {
    long long extra = 0;
    for (int q = 0; q < Num; q++) extra += detail::phase_wavefronts(w.ldm_addr + 8 * q, 8) - 1;
    g_ldmatrix_matrices.fetch_add(Num, std::memory_order_relaxed);
    g_ldmatrix_conflict_wavefronts.fetch_add(extra, std::memory_order_relaxed);
  }
  const bool trans =
      Trans && g_ldmatrix_fault.load(std::memory_order_relaxed) != LdmatrixFault::kIgnoreTrans;
  const int g = int(me) / 4, t = int(me) % 4;
  std::array<uint32_t, Num> r;
  for (int q = 0; q < Num; q++) {
    uint16_t lo, hi;
    if (!trans) {
      std::memcpy(&lo, row[8 * q + g] + 4 * t, 2);
      std::memcpy(&hi, row[8 * q + g] + 4 * t + 2, 2);
    } else {
      std::memcpy(&lo, row[8 * q + 2 * t] + 2 * g, 2);
      std::memcpy(&hi, row[8 * q + 2 * t + 1] + 2 * g, 2);
    }
    r[q] = uint32_t(lo) | uint32_t(hi) << 16;
  }
  detail::wait(w.bar, "ldmatrix");  // everyone has read the addresses before the next one writes
  return r;
}

// Test-only fault injection in cp.async (negative controls).
enum class CpAsyncFault {
  kNone,
  kWaitOneGroupShort,  // cp.async.wait_group N, N > 0, leaves N + 1 groups pending
};
inline std::atomic<CpAsyncFault> g_cp_async_fault{CpAsyncFault::kNone};
inline std::atomic<long long> g_cp_async_count{0};  // cp.async copies issued since the start

// cp.async.{ca,cg}.shared.global [dst], [src], cp_size{, src_size} (PTX ISA, "cp.async"): copies
// cp_size bytes (4, 8 or 16; .cg: 16), of which the first src_size come from src and the rest are
// zero, completing at an unspecified time before the thread's cp.async.wait_group that covers its
// group. The emulator takes the latest moment for the copy and the earliest for the destination to
// change: the destination is poisoned (0xFF bytes: NaN as float and bf16) when the copy is issued
// and the bytes are copied only at that wait, so a read before the wait (or before the barrier
// that publishes other threads' copies) sees NaN. Copies never waited for fail the launch.
inline void cp_async(bool cg, uint32_t dst, const void* src, int cp_size, int src_size) {
  if (cg ? cp_size != 16 : (cp_size != 4 && cp_size != 8 && cp_size != 16))
    throw std::runtime_error("cuda_emu: cp.async copy size " + std::to_string(cp_size) +
                             " (cp.async.ca: 4, 8 or 16 bytes; cp.async.cg: 16)");
  if (src_size < 0 || src_size > cp_size)
    throw std::runtime_error("cuda_emu: cp.async src-size " + std::to_string(src_size) +
                             " outside 0.." + std::to_string(cp_size));
  if (dst % uint32_t(cp_size) != 0 || reinterpret_cast<uintptr_t>(src) % uintptr_t(cp_size) != 0)
    throw std::runtime_error("cuda_emu: cp.async addresses must be aligned to the copy size");
  unsigned char* d = detail::shared_at(dst, size_t(cp_size), "cp.async");
  std::memset(d, 0xFF, size_t(cp_size));
  detail::block().async[detail::t_tid].open.push_back(
      {d, static_cast<const unsigned char*>(src), cp_size, src_size});
  g_cp_async_count.fetch_add(1, std::memory_order_relaxed);
}
inline void cp_async_ca(uint32_t dst, const void* src, int cp_size, int src_size) {
  cp_async(false, dst, src, cp_size, src_size);
}
inline void cp_async_ca(uint32_t dst, const void* src, int cp_size) {
  cp_async(false, dst, src, cp_size, cp_size);
}
inline void cp_async_cg(uint32_t dst, const void* src, int cp_size, int src_size) {
  cp_async(true, dst, src, cp_size, src_size);
}
inline void cp_async_cg(uint32_t dst, const void* src, int cp_size) {
  cp_async(true, dst, src, cp_size, cp_size);
}
// cp.async.commit_group: this thread's uncommitted copies become its newest group (possibly empty).
inline void cp_async_commit_group() {
  detail::AsyncState& st = detail::block().async[detail::t_tid];
  st.groups.push_back(std::move(st.open));
  st.open.clear();
}
// cp.async.wait_group n: this thread's groups other than the n newest complete (now).
inline void cp_async_wait_group(int n) {
  if (n < 0) throw std::runtime_error("cuda_emu: cp.async.wait_group with a negative count");
  if (n > 0 && g_cp_async_fault.load(std::memory_order_relaxed) == CpAsyncFault::kWaitOneGroupShort)
    n++;
  detail::AsyncState& st = detail::block().async[detail::t_tid];
  size_t done = 0;
  for (; st.groups.size() - done > size_t(n); done++)
    for (const detail::AsyncCopy& c : st.groups[done]) {
      std::memcpy(c.dst, c.src, size_t(c.src_size));
      std::memset(c.dst + c.src_size, 0, size_t(c.size - c.src_size));
    }
  st.groups.erase(st.groups.begin(), st.groups.begin() + std::ptrdiff_t(done));
}
// cp.async.wait_all: commit_group, then wait_group 0.
inline void cp_async_wait_all() {
  cp_async_commit_group();
  cp_async_wait_group(0);
}

// ---- host side -------------------------------------------------------------------------------

// Runs kernel() (a callable that calls the generated kernel with its arguments) once per thread of
// every block of grid. Throws std::runtime_error when a thread threw (the first message), a block
// deadlocked or wrote past its shared memory (the launch stops at the first failing block).
template <class F>
void launch(dim3 grid, dim3 block, size_t dynamic_smem_bytes, F&& kernel) {
  const unsigned nthreads = block.x * block.y * block.z;
  if (nthreads == 0 || nthreads > 1024)
    throw std::invalid_argument("cuda_emu::launch: threads per block must be 1..1024");
  const size_t nblocks = size_t(grid.x) * grid.y * grid.z;
  if (nblocks == 0) return;
  detail::Scheduler& sched = detail::scheduler();
  if (sched.running()) throw std::logic_error("cuda_emu::launch: called from device code");
  const detail::Order order = detail::order_from_env();
  using K = std::remove_reference_t<F>;
  void (*body)(void*) = [](void* k) { (*static_cast<K*>(k))(); };
  void* arg = const_cast<void*>(static_cast<const void*>(std::addressof(kernel)));
  blockDim = block;
  gridDim = grid;
  std::string error;
  for (size_t n = 0; n < nblocks && error.empty(); n++) {
    detail::Block blk(nthreads, dynamic_smem_bytes);
    detail::t_block = &blk;
    blockIdx = make_uint3(unsigned(n % grid.x), unsigned((n / grid.x) % grid.y),
                          unsigned(n / (size_t(grid.x) * grid.y)));
    const bool reverse = order == detail::Order::kReverse ||
                         (order == detail::Order::kAlternate && n % 2 == 1);
    const std::string where = "block (" + std::to_string(blockIdx.x) + "," +
                              std::to_string(blockIdx.y) + "," + std::to_string(blockIdx.z) + ")";
    error = sched.run_block(blk, nthreads, reverse, body, arg);
    if (!error.empty()) {
      error = where + ": " + error;
    } else {
      const std::string bad = blk.overrun();
      if (!bad.empty()) error = "cuda_emu: " + where + " wrote past " + bad;
      const std::string unwaited = bad.empty() ? blk.unwaited_copies() : std::string();
      if (!unwaited.empty()) error = "cuda_emu: " + where + ": " + unwaited;
    }
    detail::t_block = nullptr;
  }
  if (!error.empty()) throw std::runtime_error(error);
}

// ---- launches as the CUDA runtime makes them (the generator's rewrite of <<<>>>) ---------------

// The runtime's per-host-thread error state (cudaGetLastError / cudaPeekAtLastError).
inline thread_local cudaError_t t_last_error = cudaSuccess;
// cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, n), per kernel.
inline std::mutex g_func_mu;
inline std::map<const void*, int> g_func_max_dynamic_smem;

namespace detail {
// cudaSuccess or the error CUDA reports for this configuration.
inline cudaError_t check_config(const void* kernel, dim3 grid, dim3 block, size_t smem) {
  if (block.x == 0 || block.y == 0 || block.z == 0 || block.x > 1024 || block.y > 1024 ||
      block.z > 64 || (unsigned long long)block.x * block.y * block.z > 1024)
    return cudaErrorInvalidConfiguration;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 ||
      grid.z > 65535)
    return cudaErrorInvalidConfiguration;
  if (smem > kSmemDefault) {
    std::lock_guard<std::mutex> lk(g_func_mu);
    const auto it = g_func_max_dynamic_smem.find(kernel);
    if (it == g_func_max_dynamic_smem.end() || size_t(it->second) < smem) return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}
}  // namespace detail

// kernel<<<grid, block, smem, stream>>>(args...): the arguments are converted once to the kernel's
// parameter types (as the launch copies them), then every thread calls the kernel with them. A bad
// configuration launches nothing and is left for cudaGetLastError, as on the device; the launch is
// synchronous (the stream is ignored). Emulation failures (shared memory overruns, partial masks,
// a thread's exception) throw std::runtime_error from here.
template <class... P, class... A>
void launch_kernel(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t,
                   A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A),
                "cuda_emu::launch_kernel: the launch passes another number of arguments than the "
                "kernel has parameters (default arguments are not supported)");
  const cudaError_t e =
      detail::check_config(reinterpret_cast<const void*>(kernel), grid, block, smem);
  if (e != cudaSuccess) {
    t_last_error = e;
    return;
  }
  const std::tuple<std::decay_t<P>...> params(std::forward<A>(args)...);
  launch(grid, block, smem, [&] { std::apply(kernel, params); });
}

// Scoped fault injection for negative controls.
template <class E>
struct ScopedFault {
  ScopedFault(std::atomic<E>& slot, E f) : slot_(slot), prev(slot.exchange(f)) {}
  ~ScopedFault() { slot_.store(prev); }
  ScopedFault(const ScopedFault&) = delete;
  ScopedFault& operator=(const ScopedFault&) = delete;
  std::atomic<E>& slot_;
  E prev;
};
struct ScopedMmaFault {
  explicit ScopedMmaFault(MmaFault f) : prev(g_mma_fault.exchange(f)) {}
  ~ScopedMmaFault() { g_mma_fault.store(prev); }
  ScopedMmaFault(const ScopedMmaFault&) = delete;
  ScopedMmaFault& operator=(const ScopedMmaFault&) = delete;
  MmaFault prev;
};

}  // namespace cuda_emu
