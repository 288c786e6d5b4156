// CudnnOps (cudnn_ops.h): the CNN ops through cuDNN 9.
//
// Why the legacy API (cudnnConvolutionForward & co., still shipped in cuDNN 9's cudnn_cnn and
// cudnn_ops libraries, marked deprecated) and not the graph API: every op here is a single
// operation on NCHW tensors, for which the legacy calls document their data-type configurations
// and offer heuristics, a workspace query and an explicit workspace; the graph API would need
// NHWC layouts for its normalization and pooling engines, and which engine accepts a graph is
// only known on a device -- nothing CUDA has ever run in this project, so the path with the
// fewest device-dependent unknowns wins, and it is the one the CPU shim
// (tests/emu/cudnn_emu.cpp) can emulate call for call. When a cuDNN release drops the legacy
// API, this file is what moves to the graph API.
//
// Choices, per op (backend.h has the contracts):
//  - Convolution: cross-correlation, dilation 1, fp32 compute. Algorithms from cuDNN's heuristic
//    (cudnnGetConvolution*Algorithm_v7, no benchmarking: nothing is allocated or timed), the
//    first candidate that is deterministic (issue 6: same inputs, same bits), needs at most
//    kMaxWorkspace and has an allowed math type:
//      fp32 activations: CUDNN_FMA_MATH only (no TF32: the fp32 backend matches the CPU to
//        rounding, as cuBLAS with CUBLAS_PEDANTIC_MATH in kernels/gemm.cu);
//      bf16 activations, forward and backward-data: bf16 x / w / y, fp32 accumulation, tensor
//        cores (never CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION);
//      bf16 weight gradient: dw is fp32 (backend.h) and cuDNN has no bf16-in / fp32-out
//        configuration, so x and dy are widened to fp32 (exactly) and the gradient runs in fp32
//        with tensor cores allowed: TF32 holds a bf16 value exactly, so the products are exact
//        and accumulate in fp32 -- restricted to the GEMM algorithms (0, 1, 3), since FFT and
//        Winograd transform the inputs first and TF32 would round the transformed values. The
//        widening goes a batch chunk at a time (set_widen_budget) and accumulates (beta = 1).
//    y, dx: beta = 0 (overwritten, never read: cuDNN's rule for beta = 0). dw: beta = 1.
//    Bias: kernels/cnn.cu (a per-channel add after the convolution -- in bf16 that rounds the
//    convolution's output twice, as PyTorch's conv + bias does -- and a deterministic
//    per-channel sum for db).
//  - Batch norm: CUDNN_BATCHNORM_SPATIAL, x / y in the act dtype, statistics and gamma / beta in
//    fp32 (bf16 compute weights are widened). Training: cuDNN's outputs are the running mean and
//    the running variance it updates with factor 1 -- the batch mean and the UNBIASED batch
//    variance (cuDNN applies Bessel's correction to the running variance, as PyTorch's running
//    var); backend.h's var is the biased one, so it is scaled by (m - 1) / m, m = N * HW (one
//    rounding of an already fp32 value, ~1e-7 relative; the alternative, 1 / saved_inv_std^2 -
//    eps, cancels catastrophically when var << eps). The running buffers are zeroed first so
//    that (1 - factor) * old is 0 even when old is garbage. m = 1 is refused (no variance).
//    Backward: cuDNN's "saved inverse variance" is 1 / sqrt(var + eps) (an inverse standard
//    deviation), computed from the given var by kernels/cnn.cu, so the backward uses exactly the
//    caller's statistics; dx overwritten (beta 0), dgamma / dbeta accumulated (beta 1).
//  - Pooling: in fp32 always (bf16 tensors are widened / rounded around it: a max is exact, an
//    average rounds once): cuDNN's legacy pooling documents no bf16 configuration, and pooling is
//    memory-bound and small beside the convolutions. Max: CUDNN_POOLING_MAX_DETERMINISTIC, NaN
//    propagated; its backward needs x and y, kept in the caller's workspace (act dtype).
//    Average: CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING (backend.h); its backward reads neither
//    x nor y, so y is given dy's buffer and x a scratch of x's extent (valid memory, unread).
#include "backend/cuda/cudnn_ops.h"

#include <cudnn.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/error.h"
#include "kernels/cast.cuh"
#include "kernels/cnn.cuh"
#include "kernels/elementwise.cuh"

namespace baton {
namespace {

constexpr size_t kMaxWorkspace = size_t(1) << 30;     // per convolution call
constexpr size_t kDefaultWidenBudget = size_t(256) << 20;
constexpr size_t kAlign = 256;
size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

const char* const kHint =
    "cuDNN 9 libraries (libcudnn*.so.9) must be on the loader path (launch/bundle.sh finds them "
    "in the CUDA toolkit or PyTorch's site-packages/nvidia/cudnn/lib); "
    "CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=stderr prints cuDNN's reason";

// `what` names the operation: a string, or a callable giving one (the per-step calls format
// their shape only when they fail).
template <typename What>
void check(cudnnStatus_t st, const char* call, const What& what) {
  if (st == CUDNN_STATUS_SUCCESS) return;
  std::string name;
  if constexpr (std::is_invocable_v<What>)
    name = what();
  else
    name = what;
  throw Error(fmt::format("cuDNN: {} failed for {}: {}", call, name, cudnnGetErrorString(st)), kHint);
}
void check_cuda(cudaError_t e, const char* call) {
  if (e != cudaSuccess)
    throw Error(fmt::format("CUDA: {}: {}", call, cudaGetErrorString(e)),
                "check the GPU with nvidia-smi; rerun with CUDA_LAUNCH_BLOCKING=1 to locate it");
}

// A cuDNN descriptor owned by one object (created in the constructor, destroyed once).
template <typename T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
class Owned {
 public:
  Owned() { check(Create(&d_), "create descriptor", "a descriptor"); }
  ~Owned() {
    if (d_ != nullptr) Destroy(d_);
  }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  T get() const { return d_; }

 private:
  T d_ = nullptr;
};
using TensorDesc = Owned<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDesc = Owned<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvDesc = Owned<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor,
                       cudnnDestroyConvolutionDescriptor>;
using PoolDesc = Owned<cudnnPoolingDescriptor_t, cudnnCreatePoolingDescriptor, cudnnDestroyPoolingDescriptor>;

cudnnDataType_t cudnn_type(DType t) { return t == DType::BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT; }

// n * c * h * w elements, refused beyond what the legacy API's int dimensions and strides hold.
size_t elements(int n, int c, int h, int w, const std::string& what) {
  const size_t e = size_t(n) * size_t(c) * size_t(h) * size_t(w);
  BATON_REQUIRE(e <= size_t(INT_MAX),
                fmt::format("{}: a tensor of {} elements is beyond cuDNN's 2^31 - 1", what, e),
                "use a smaller micro-batch (train.micro_batch)");
  return e;
}
void set_tensor(const TensorDesc& d, cudnnDataType_t t, int n, int c, int h, int w, const std::string& what) {
  elements(n, c, h, w, what);
  check(cudnnSetTensor4dDescriptor(d.get(), CUDNN_TENSOR_NCHW, t, n, c, h, w), "cudnnSetTensor4dDescriptor", what);
}

std::string conv_name(const Conv2d& c, DType act) {
  return fmt::format("conv2d N={} C={} H={} W={} K={} R={} S={} stride={} pad={} ({})", c.N, c.C, c.H,
                     c.W, c.K, c.R, c.S, c.stride, c.pad, dtype_name(act));
}
std::string pool_name(const Pool2d& p, DType act) {
  return fmt::format("{} pool N={} C={} H={} W={} R={} S={} stride={} pad={} ({})",
                     p.max ? "max" : "average", p.N, p.C, p.H, p.W, p.R, p.S, p.stride, p.pad,
                     dtype_name(act));
}

// ---- algorithm choice ------------------------------------------------------------------------

enum class MathRule {
  FMA_ONLY,      // fp32 activations: exact fp32 products, as the CPU
  TENSOR_CORES,  // bf16 data, or fp32 copies of bf16 data (TF32 exact): anything but down-conversion
};
bool math_ok(cudnnMathType_t m, MathRule rule) {
  if (rule == MathRule::FMA_ONLY) return m == CUDNN_FMA_MATH;
  return m != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

struct Choice {
  int algo = -1;
  size_t workspace = 0;
};

// The first of the heuristic's candidates (ordered by expected speed) that the heuristic itself
// accepted, is deterministic, follows the math rule, passes `algo_ok` and whose workspace (asked
// of cuDNN for that algorithm) is at most kMaxWorkspace. Sets the descriptor's math type to the
// chosen candidate's, as the execution must use it.
template <typename Perf, typename WorkspaceFn>
Choice choose(const std::vector<Perf>& perfs, MathRule rule, bool (*algo_ok)(int), WorkspaceFn workspace,
              cudnnConvolutionDescriptor_t conv, const char* direction, const std::string& what) {
  std::string tried;
  for (const Perf& p : perfs) {
    const int algo = int(p.algo);
    if (p.status != CUDNN_STATUS_SUCCESS) continue;
    tried += fmt::format(" {}:", algo);
    if (p.determinism != CUDNN_DETERMINISTIC) { tried += "nondeterministic"; continue; }
    if (!math_ok(p.mathType, rule)) { tried += fmt::format("math{}", int(p.mathType)); continue; }
    if (algo_ok != nullptr && !algo_ok(algo)) { tried += "inexact"; continue; }
    size_t bytes = 0;
    if (workspace(p.algo, &bytes) != CUDNN_STATUS_SUCCESS) { tried += "no-workspace-size"; continue; }
    if (bytes > kMaxWorkspace) { tried += fmt::format("workspace {} MiB", bytes >> 20); continue; }
    check(cudnnSetConvolutionMathType(conv, p.mathType), "cudnnSetConvolutionMathType", what);
    return Choice{algo, bytes};
  }
  throw Error(fmt::format("cuDNN offers no usable {} algorithm for {} (candidates:{})", direction, what,
                          tried.empty() ? " none" : tried),
              "a deterministic algorithm with at most 1 GiB of workspace is required; report the shape");
}

// Asks cuDNN's heuristic for its candidates -- max_count(int*), then heuristic(requested, int*
// returned, Perf*) -- and chooses among them (choose above).
template <typename Perf, typename MaxCountFn, typename HeuristicFn, typename WorkspaceFn>
Choice pick(MaxCountFn max_count, HeuristicFn heuristic, MathRule rule, bool (*algo_ok)(int), WorkspaceFn workspace,
            cudnnConvolutionDescriptor_t conv, const char* direction, const std::string& what) {
  int count = 0;
  check(max_count(&count), "cudnnGetConvolution*AlgorithmMaxCount", what);
  std::vector<Perf> perfs(size_t(std::max(count, 1)));
  int got = 0;
  check(heuristic(int(perfs.size()), &got, perfs.data()), "cudnnGetConvolution*Algorithm_v7", what);
  perfs.resize(size_t(std::clamp(got, 0, int(perfs.size()))));
  return choose(perfs, rule, algo_ok, workspace, conv, direction, what);
}

// GEMM-form weight-gradient algorithms (exact products under TF32 for bf16-valued inputs).
bool gemm_form_wgrad(int algo) {
  return algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 || algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 ||
         algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
}

// ---- per-shape plans -------------------------------------------------------------------------

// A convolution's descriptors in the act dtype, with the forward and backward-data choices (made
// on first use of each direction: an evaluation-only shape never asks for backward algorithms).
struct ConvPlan {
  TensorDesc x, y;
  FilterDesc w;
  ConvDesc fwd_conv, data_conv;  // one per direction: each carries its algorithm's math type
  bool have_fwd = false, have_data = false;
  Choice fwd, data;
};
// A weight gradient over n samples: fp32 descriptors (the act dtype's in fp32, the widened
// copies' in bf16).
struct WgradPlan {
  TensorDesc x, dy;
  FilterDesc dw;
  ConvDesc conv;
  Choice algo;
};
struct BnPlan {
  TensorDesc x;      // [N, C, HW, 1] in the act dtype (x, y, dy, dx)
  TensorDesc param;  // [1, C, 1, 1] fp32 (gamma, beta, mean, var and their gradients)
};
struct PoolPlan {
  PoolDesc pool;
  TensorDesc x, y;  // fp32
};
// What both pooling directions start from: the shape's plan and sizes (elements of x and y, bytes
// per act element).
struct PoolCall {
  PoolPlan& plan;
  size_t nx, ny, e;
};

using ConvKey = std::array<int, 9>;
ConvKey conv_key(const Conv2d& c) { return {c.N, c.C, c.H, c.W, c.K, c.R, c.S, c.stride, c.pad}; }

void validate(const Conv2d& c, DType act) {
  BATON_REQUIRE(c.N > 0 && c.C > 0 && c.H > 0 && c.W > 0 && c.K > 0 && c.R > 0 && c.S > 0 &&
                    c.stride > 0 && c.pad >= 0 && c.H + 2 * c.pad >= c.R && c.W + 2 * c.pad >= c.S,
                fmt::format("invalid convolution: {}", conv_name(c, act)),
                "every size must be positive and the padded input at least as large as the kernel");
}
void validate(const Pool2d& p, DType act) {
  BATON_REQUIRE(p.N > 0 && p.C > 0 && p.H > 0 && p.W > 0 && p.R > 0 && p.S > 0 && p.stride > 0 &&
                    p.pad >= 0 && p.pad < p.R && p.pad < p.S && p.H + 2 * p.pad >= p.R &&
                    p.W + 2 * p.pad >= p.S,
                fmt::format("invalid pooling: {}", pool_name(p, act)),
                "sizes must be positive, the padding smaller than the window (cuDNN) and the padded "
                "input at least as large as the window");
}

}  // namespace

// ---- state -------------------------------------------------------------------------------------

struct CudnnOps::Impl {
  cudaStream_t stream;
  DType act;
  bool bf16;
  DeviceMemory memory;
  cudnnHandle_t handle = nullptr;
  size_t widen_budget = kDefaultWidenBudget;

  // The three buffers (cudnn_ops.h): grown to the largest request, never shrunk.
  struct Buffer {
    void* p = nullptr;
    size_t bytes = 0;
  };
  Buffer workspace, widen, small;

  std::map<ConvKey, std::unique_ptr<ConvPlan>> convs;
  std::map<ConvKey, std::unique_ptr<WgradPlan>> wgrads;  // key: the shape with N = the chunk's n
  std::map<std::array<int, 3>, std::unique_ptr<BnPlan>> bns;
  std::map<std::array<int, 9>, std::unique_ptr<PoolPlan>> pools;

  // Valid until the next grow of the same buffer; an op asks each buffer once, for all it needs.
  void* grow(Buffer& b, size_t bytes) {
    bytes = std::max<size_t>(bytes, 1);
    if (bytes > b.bytes) {
      memory.release(b.p);
      b.p = nullptr;
      b.bytes = 0;
      b.p = memory.alloc(round_up(bytes, kAlign));
      b.bytes = round_up(bytes, kAlign);
    }
    return b.p;
  }
  // Four fp32 vectors of C floats each, 256-byte aligned, in the small buffer.
  std::array<float*, 4> channel_vectors(int C) {
    const size_t stride = round_up(size_t(C) * sizeof(float), kAlign);
    char* base = static_cast<char*>(grow(small, stride * 4));
    std::array<float*, 4> v;
    for (size_t i = 0; i < v.size(); i++) v[i] = reinterpret_cast<float*>(base + stride * i);
    return v;
  }

  ConvPlan& conv_plan(const Conv2d& c) {
    auto& slot = convs[conv_key(c)];
    if (slot) return *slot;
    const std::string what = conv_name(c, act);
    auto p = std::make_unique<ConvPlan>();
    const cudnnDataType_t t = cudnn_type(act);
    set_tensor(p->x, t, c.N, c.C, c.H, c.W, what);
    set_tensor(p->y, t, c.N, c.K, c.P(), c.Q(), what);
    elements(c.K, c.C, c.R, c.S, what);
    check(cudnnSetFilter4dDescriptor(p->w.get(), t, CUDNN_TENSOR_NCHW, c.K, c.C, c.R, c.S),
          "cudnnSetFilter4dDescriptor", what);
    for (const ConvDesc* d : {&p->fwd_conv, &p->data_conv}) {
      check(cudnnSetConvolution2dDescriptor(d->get(), c.pad, c.pad, c.stride, c.stride, 1, 1,
                                            CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
            "cudnnSetConvolution2dDescriptor", what);
      check(cudnnSetConvolutionMathType(d->get(), bf16 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH),
            "cudnnSetConvolutionMathType", what);
    }
    int n = 0, k = 0, h = 0, w = 0;  // cuDNN's output shape must be backend.h's
    check(cudnnGetConvolution2dForwardOutputDim(p->fwd_conv.get(), p->x.get(), p->w.get(), &n, &k, &h, &w),
          "cudnnGetConvolution2dForwardOutputDim", what);
    BATON_ASSERT(n == c.N && k == c.K && h == c.P() && w == c.Q(), "{}: cuDNN's output is {}x{}x{}x{}",
                 what, n, k, h, w);
    slot = std::move(p);
    return *slot;
  }

  const Choice& forward_choice(ConvPlan& p, const Conv2d& c) {
    if (p.have_fwd) return p.fwd;
    p.fwd = pick<cudnnConvolutionFwdAlgoPerf_t>(
        [&](int* count) { return cudnnGetConvolutionForwardAlgorithmMaxCount(handle, count); },
        [&](int requested, int* got, cudnnConvolutionFwdAlgoPerf_t* perfs) {
          return cudnnGetConvolutionForwardAlgorithm_v7(handle, p.x.get(), p.w.get(), p.fwd_conv.get(), p.y.get(),
                                                        requested, got, perfs);
        },
        bf16 ? MathRule::TENSOR_CORES : MathRule::FMA_ONLY, nullptr,
        [&](cudnnConvolutionFwdAlgo_t a, size_t* bytes) {
          return cudnnGetConvolutionForwardWorkspaceSize(handle, p.x.get(), p.w.get(), p.fwd_conv.get(), p.y.get(),
                                                         a, bytes);
        },
        p.fwd_conv.get(), "forward", conv_name(c, act));
    p.have_fwd = true;
    return p.fwd;
  }

  const Choice& data_choice(ConvPlan& p, const Conv2d& c) {
    if (p.have_data) return p.data;
    p.data = pick<cudnnConvolutionBwdDataAlgoPerf_t>(
        [&](int* count) { return cudnnGetConvolutionBackwardDataAlgorithmMaxCount(handle, count); },
        [&](int requested, int* got, cudnnConvolutionBwdDataAlgoPerf_t* perfs) {
          return cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, p.w.get(), p.y.get(), p.data_conv.get(),
                                                             p.x.get(), requested, got, perfs);
        },
        bf16 ? MathRule::TENSOR_CORES : MathRule::FMA_ONLY, nullptr,
        [&](cudnnConvolutionBwdDataAlgo_t a, size_t* bytes) {
          return cudnnGetConvolutionBackwardDataWorkspaceSize(handle, p.w.get(), p.y.get(), p.data_conv.get(),
                                                              p.x.get(), a, bytes);
        },
        p.data_conv.get(), "backward-data", conv_name(c, act));
    p.have_data = true;
    return p.data;
  }

  // The weight-gradient plan for `n` samples of shape c (fp32 tensors).
  WgradPlan& wgrad_plan(const Conv2d& c, int n) {
    Conv2d cn = c;
    cn.N = n;
    auto& slot = wgrads[conv_key(cn)];
    if (slot) return *slot;
    const std::string what = conv_name(cn, act) + " weight gradient";
    auto p = std::make_unique<WgradPlan>();
    set_tensor(p->x, CUDNN_DATA_FLOAT, n, c.C, c.H, c.W, what);
    set_tensor(p->dy, CUDNN_DATA_FLOAT, n, c.K, c.P(), c.Q(), what);
    check(cudnnSetFilter4dDescriptor(p->dw.get(), CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, c.K, c.C, c.R, c.S),
          "cudnnSetFilter4dDescriptor", what);
    check(cudnnSetConvolution2dDescriptor(p->conv.get(), c.pad, c.pad, c.stride, c.stride, 1, 1,
                                          CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
          "cudnnSetConvolution2dDescriptor", what);
    check(cudnnSetConvolutionMathType(p->conv.get(), bf16 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH),
          "cudnnSetConvolutionMathType", what);
    WgradPlan* q = p.get();
    p->algo = pick<cudnnConvolutionBwdFilterAlgoPerf_t>(
        [&](int* count) { return cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(handle, count); },
        [&](int requested, int* got, cudnnConvolutionBwdFilterAlgoPerf_t* perfs) {
          return cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, q->x.get(), q->dy.get(), q->conv.get(),
                                                               q->dw.get(), requested, got, perfs);
        },
        bf16 ? MathRule::TENSOR_CORES : MathRule::FMA_ONLY, bf16 ? &gemm_form_wgrad : nullptr,
        [&](cudnnConvolutionBwdFilterAlgo_t a, size_t* bytes) {
          return cudnnGetConvolutionBackwardFilterWorkspaceSize(handle, q->x.get(), q->dy.get(), q->conv.get(),
                                                                q->dw.get(), a, bytes);
        },
        p->conv.get(), "weight-gradient", what);
    slot = std::move(p);
    return *slot;
  }

  BnPlan& bn_plan(int N, int C, int HW) {
    auto& slot = bns[{N, C, HW}];
    if (slot) return *slot;
    const std::string what = fmt::format("batch norm N={} C={} HW={} ({})", N, C, HW, dtype_name(act));
    auto p = std::make_unique<BnPlan>();
    set_tensor(p->x, cudnn_type(act), N, C, HW, 1, what);
    set_tensor(p->param, CUDNN_DATA_FLOAT, 1, C, 1, 1, what);
    slot = std::move(p);
    return *slot;
  }

  PoolPlan& pool_plan(const Pool2d& q) {
    auto& slot = pools[{q.N, q.C, q.H, q.W, q.R, q.S, q.stride, q.pad, q.max ? 1 : 0}];
    if (slot) return *slot;
    const std::string what = pool_name(q, act);
    auto p = std::make_unique<PoolPlan>();
    check(cudnnSetPooling2dDescriptor(p->pool.get(),
                                      q.max ? CUDNN_POOLING_MAX_DETERMINISTIC
                                            : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,
                                      CUDNN_PROPAGATE_NAN, q.R, q.S, q.pad, q.pad, q.stride, q.stride),
          "cudnnSetPooling2dDescriptor", what);
    set_tensor(p->x, CUDNN_DATA_FLOAT, q.N, q.C, q.H, q.W, what);
    set_tensor(p->y, CUDNN_DATA_FLOAT, q.N, q.C, q.P(), q.Q(), what);
    int n = 0, c = 0, h = 0, w = 0;
    check(cudnnGetPooling2dForwardOutputDim(p->pool.get(), p->x.get(), &n, &c, &h, &w),
          "cudnnGetPooling2dForwardOutputDim", what);
    BATON_ASSERT(n == q.N && c == q.C && h == q.P() && w == q.Q(), "{}: cuDNN's output is {}x{}x{}x{}",
                 what, n, c, h, w);
    slot = std::move(p);
    return *slot;
  }

  PoolCall pool_call(const Pool2d& q, const void* workspace) {
    validate(q, act);
    BATON_REQUIRE(!q.max || workspace != nullptr, fmt::format("{}: no workspace", pool_name(q, act)),
                  "pass pool2d_workspace_bytes() bytes of backend memory, the same to the forward and backward");
    return {pool_plan(q), size_t(q.N) * q.C * q.H * q.W, size_t(q.N) * q.C * q.P() * q.Q(), dtype_size(act)};
  }

  // Act-dtype tensor helpers: widen a bf16 tensor into fp32 / round an fp32 one into bf16.
  void widen_to(float* dst, const void* src, size_t n) {
    kernels::cast_bf16_to_f32(dst, static_cast<const kernels::bf16*>(src), n, stream);
  }
  void round_to(void* dst, const float* src, size_t n) {
    kernels::cast_f32_to_bf16(static_cast<kernels::bf16*>(dst), src, n, stream);
  }
  // gamma as fp32: the compute weight itself in fp32, a widened copy in bf16.
  const float* param_f32(const void* p, float* scratch, int C) {
    if (!bf16) return static_cast<const float*>(p);
    widen_to(scratch, p, size_t(C));
    return scratch;
  }
};

// ---- construction ------------------------------------------------------------------------------

CudnnOps::CudnnOps(cudaStream_t stream, DType act, DeviceMemory memory) : impl_(std::make_unique<Impl>()) {
  BATON_ASSERT(act == DType::F32 || act == DType::BF16, "CudnnOps: act dtype {}", dtype_name(act));
  Impl& m = *impl_;
  m.stream = stream;
  m.act = act;
  m.bf16 = act == DType::BF16;
  m.memory = std::move(memory);
  // The library the loader found must be the major version the build compiled against.
  const size_t version = cudnnGetVersion();
  BATON_REQUIRE(version / 10000 == CUDNN_MAJOR,
                fmt::format("cuDNN {} was loaded, the build expects cuDNN {}.x", version, CUDNN_MAJOR),
                kHint);
  check(cudnnCreate(&m.handle), "cudnnCreate", "the CUDA backend's CNN ops");
  check(cudnnSetStream(m.handle, stream), "cudnnSetStream", "the CUDA backend's stream");
}

CudnnOps::~CudnnOps() {
  Impl& m = *impl_;
  m.convs.clear();
  m.wgrads.clear();
  m.bns.clear();
  m.pools.clear();
  if (m.handle != nullptr) cudnnDestroy(m.handle);
  for (Impl::Buffer* b : {&m.workspace, &m.widen, &m.small}) m.memory.release(b->p);
}

void CudnnOps::set_widen_budget(size_t bytes) { impl_->widen_budget = bytes; }

size_t CudnnOps::buffer_bytes() const {
  return impl_->workspace.bytes + impl_->widen.bytes + impl_->small.bytes;
}

// ---- convolution -------------------------------------------------------------------------------

void CudnnOps::conv2d_forward(void* y, const void* x, const void* w, const void* bias, const Conv2d& c) {
  Impl& m = *impl_;
  validate(c, m.act);
  ConvPlan& p = m.conv_plan(c);
  const Choice& ch = m.forward_choice(p, c);
  void* ws = m.grow(m.workspace, ch.workspace);
  const float one = 1.0f, zero = 0.0f;
  check(cudnnConvolutionForward(m.handle, &one, p.x.get(), x, p.w.get(), w, p.fwd_conv.get(),
                                cudnnConvolutionFwdAlgo_t(ch.algo), ws, ch.workspace, &zero, p.y.get(), y),
        "cudnnConvolutionForward", [&] { return conv_name(c, m.act); });
  if (bias == nullptr) return;
  if (m.bf16)
    kernels::conv_bias_forward(static_cast<kernels::bf16*>(y), static_cast<const kernels::bf16*>(bias), c.N,
                               c.K, c.P() * c.Q(), m.stream);
  else
    kernels::conv_bias_forward(static_cast<float*>(y), static_cast<const float*>(bias), c.N, c.K,
                               c.P() * c.Q(), m.stream);
}

void CudnnOps::conv2d_backward(void* dx, float* dw, float* db, const void* dy, const void* x, const void* w,
                               const Conv2d& c) {
  Impl& m = *impl_;
  validate(c, m.act);
  const auto what = [&] { return conv_name(c, m.act); };
  const float one = 1.0f, zero = 0.0f;
  ConvPlan& p = m.conv_plan(c);
  if (dx != nullptr) {
    const Choice& ch = m.data_choice(p, c);
    void* ws = m.grow(m.workspace, ch.workspace);
    check(cudnnConvolutionBackwardData(m.handle, &one, p.w.get(), w, p.y.get(), dy, p.data_conv.get(),
                                       cudnnConvolutionBwdDataAlgo_t(ch.algo), ws, ch.workspace, &zero,
                                       p.x.get(), dx),
          "cudnnConvolutionBackwardData", what);
  }
  if (dw != nullptr) {
    const size_t x_sample = size_t(c.C) * c.H * c.W, y_sample = size_t(c.K) * c.P() * c.Q();
    if (!m.bf16) {
      WgradPlan& g = m.wgrad_plan(c, c.N);
      void* ws = m.grow(m.workspace, g.algo.workspace);
      check(cudnnConvolutionBackwardFilter(m.handle, &one, g.x.get(), x, g.dy.get(), dy, g.conv.get(),
                                           cudnnConvolutionBwdFilterAlgo_t(g.algo.algo), ws, g.algo.workspace,
                                           &one, g.dw.get(), dw),
            "cudnnConvolutionBackwardFilter", what);
    } else {
      // fp32 copies of a chunk of samples at a time; each chunk accumulates into dw (beta = 1).
      const size_t per_sample = (round_up(x_sample * 4, kAlign) + round_up(y_sample * 4, kAlign));
      const int chunk = int(std::clamp<size_t>(m.widen_budget / per_sample, 1, size_t(c.N)));
      const size_t x_bytes = round_up(size_t(chunk) * x_sample * 4, kAlign);
      char* buf = static_cast<char*>(m.grow(m.widen, x_bytes + size_t(chunk) * y_sample * 4));
      float* x32 = reinterpret_cast<float*>(buf);
      float* dy32 = reinterpret_cast<float*>(buf + x_bytes);
      // The workspace for the (at most two) chunk sizes, asked once before any pointer is used.
      const int last = c.N - (c.N - 1) / chunk * chunk;
      WgradPlan& full = m.wgrad_plan(c, chunk);
      WgradPlan& tail = m.wgrad_plan(c, last);
      void* ws = m.grow(m.workspace, std::max(full.algo.workspace, tail.algo.workspace));
      for (int n0 = 0; n0 < c.N; n0 += chunk) {
        const int n = std::min(chunk, c.N - n0);
        WgradPlan& g = n == chunk ? full : tail;
        m.widen_to(x32, static_cast<const kernels::bf16*>(x) + size_t(n0) * x_sample, size_t(n) * x_sample);
        m.widen_to(dy32, static_cast<const kernels::bf16*>(dy) + size_t(n0) * y_sample, size_t(n) * y_sample);
        check(cudnnConvolutionBackwardFilter(m.handle, &one, g.x.get(), x32, g.dy.get(), dy32, g.conv.get(),
                                             cudnnConvolutionBwdFilterAlgo_t(g.algo.algo), ws, g.algo.workspace,
                                             &one, g.dw.get(), dw),
              "cudnnConvolutionBackwardFilter", what);
      }
    }
  }
  if (db != nullptr) {
    if (m.bf16)
      kernels::conv_bias_backward(db, static_cast<const kernels::bf16*>(dy), c.N, c.K, c.P() * c.Q(), m.stream);
    else
      kernels::conv_bias_backward(db, static_cast<const float*>(dy), c.N, c.K, c.P() * c.Q(), m.stream);
  }
}

// ---- batch norm --------------------------------------------------------------------------------

void CudnnOps::batchnorm_forward(void* y, float* mean, float* var, const void* x, const void* gamma,
                                 const void* beta, int N, int C, int HW, float eps, bool training) {
  Impl& m = *impl_;
  const auto what = [&] { return fmt::format("batch norm N={} C={} HW={} ({})", N, C, HW, dtype_name(m.act)); };
  BATON_REQUIRE(N > 0 && C > 0 && HW > 0 && double(eps) >= CUDNN_BN_MIN_EPSILON && std::isfinite(eps),
                fmt::format("invalid {} with eps {}", what(), eps),
                "sizes must be positive and eps finite and >= 0");
  const size_t M = size_t(N) * size_t(HW);
  BATON_REQUIRE(!training || M > 1,
                fmt::format("{}: training needs more than one value per channel (N*H*W = 1)", what()),
                "use a larger micro-batch or spatial size, or evaluate (training = false)");
  BnPlan& p = m.bn_plan(N, C, HW);
  const std::array<float*, 4> v = m.channel_vectors(C);
  const float* g = m.param_f32(gamma, v[0], C);
  const float* b = m.param_f32(beta, v[1], C);
  const float one = 1.0f, zero = 0.0f;
  if (!training) {
    check(cudnnBatchNormalizationForwardInference(m.handle, CUDNN_BATCHNORM_SPATIAL, &one, &zero, p.x.get(), x,
                                                  p.x.get(), y, p.param.get(), g, b, mean, var, double(eps)),
          "cudnnBatchNormalizationForwardInference", what);
    return;
  }
  // The batch statistics arrive as the running statistics of a factor-1 update (see the top).
  check_cuda(cudaMemsetAsync(mean, 0, size_t(C) * sizeof(float), m.stream), "batch norm: zero mean");
  check_cuda(cudaMemsetAsync(var, 0, size_t(C) * sizeof(float), m.stream), "batch norm: zero var");
  check(cudnnBatchNormalizationForwardTraining(m.handle, CUDNN_BATCHNORM_SPATIAL, &one, &zero, p.x.get(), x,
                                               p.x.get(), y, p.param.get(), g, b, 1.0, mean, var, double(eps),
                                               nullptr, nullptr),
        "cudnnBatchNormalizationForwardTraining", what);
  kernels::scale(var, float(double(M - 1) / double(M)), size_t(C), m.stream);  // unbiased -> biased
}

void CudnnOps::batchnorm_backward(void* dx, float* dgamma, float* dbeta, const void* dy, const void* x,
                                  const float* mean, const float* var, const void* gamma, int N, int C,
                                  int HW, float eps) {
  Impl& m = *impl_;
  const auto what = [&] {
    return fmt::format("batch norm backward N={} C={} HW={} ({})", N, C, HW, dtype_name(m.act));
  };
  BATON_REQUIRE(N > 0 && C > 0 && HW > 0 && double(eps) >= CUDNN_BN_MIN_EPSILON && std::isfinite(eps) &&
                    dx != nullptr,
                fmt::format("invalid {} with eps {}", what(), eps),
                "sizes must be positive, eps finite and >= 0, and dx given");
  BnPlan& p = m.bn_plan(N, C, HW);
  // gamma (fp32), 1 / sqrt(var + eps), and sinks for a gradient the caller does not want
  // (cuDNN writes both parameter gradients).
  const std::array<float*, 4> v = m.channel_vectors(C);
  const float* g = m.param_f32(gamma, v[0], C);
  kernels::batchnorm_inv_std(v[1], var, eps, C, m.stream);
  const float one = 1.0f, zero = 0.0f;
  check(cudnnBatchNormalizationBackward(m.handle, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &one, p.x.get(), x,
                                        p.x.get(), dy, p.x.get(), dx, p.param.get(), g,
                                        dgamma != nullptr ? dgamma : v[2], dbeta != nullptr ? dbeta : v[3],
                                        double(eps), mean, v[1]),
        "cudnnBatchNormalizationBackward", what);
}

// ---- pooling -----------------------------------------------------------------------------------

size_t cudnn_pool2d_workspace_bytes(const Pool2d& p, DType act) {
  if (!p.max) return 0;
  const size_t e = dtype_size(act);
  return round_up(size_t(p.N) * p.C * p.H * p.W * e, kAlign) + size_t(p.N) * p.C * p.P() * p.Q() * e;
}

void CudnnOps::pool2d_forward(void* y, void* workspace, const void* x, const Pool2d& q) {
  Impl& m = *impl_;
  const auto [p, nx, ny, e] = m.pool_call(q, workspace);
  const float one = 1.0f, zero = 0.0f;
  if (!m.bf16) {
    check(cudnnPoolingForward(m.handle, p.pool.get(), &one, p.x.get(), x, &zero, p.y.get(), y),
          "cudnnPoolingForward", [&] { return pool_name(q, m.act); });
  } else {
    const size_t x_bytes = round_up(nx * 4, kAlign);
    char* buf = static_cast<char*>(m.grow(m.widen, x_bytes + ny * 4));
    float* x32 = reinterpret_cast<float*>(buf);
    float* y32 = reinterpret_cast<float*>(buf + x_bytes);
    m.widen_to(x32, x, nx);
    check(cudnnPoolingForward(m.handle, p.pool.get(), &one, p.x.get(), x32, &zero, p.y.get(), y32),
          "cudnnPoolingForward", [&] { return pool_name(q, m.act); });
    m.round_to(y, y32, ny);
  }
  if (!q.max) return;
  // Max pooling keeps its input and output for the backward (layout: cudnn_pool2d_workspace_bytes).
  char* ws = static_cast<char*>(workspace);
  check_cuda(cudaMemcpyAsync(ws, x, nx * e, cudaMemcpyDeviceToDevice, m.stream), "max pool: keep x");
  check_cuda(cudaMemcpyAsync(ws + round_up(nx * e, kAlign), y, ny * e, cudaMemcpyDeviceToDevice, m.stream),
             "max pool: keep y");
}

void CudnnOps::pool2d_backward(void* dx, const void* dy, const void* workspace, const Pool2d& q) {
  Impl& m = *impl_;
  const auto [p, nx, ny, e] = m.pool_call(q, workspace);
  const char* ws = static_cast<const char*>(workspace);
  const void* kept_x = q.max ? ws : nullptr;
  const void* kept_y = q.max ? ws + round_up(nx * e, kAlign) : nullptr;
  const float one = 1.0f, zero = 0.0f;
  // fp32 views of x, y, dy and dx; in bf16 (or for average pooling's unread x) in the widen buffer:
  // [x | y | dy | dx], each 256-byte aligned.
  const size_t bx = round_up(nx * 4, kAlign), by = round_up(ny * 4, kAlign);
  const bool need_buf = m.bf16 || !q.max;
  char* buf = need_buf ? static_cast<char*>(m.grow(m.widen, 2 * bx + 2 * by)) : nullptr;
  const void *x32 = kept_x, *y32 = kept_y, *dy32 = dy;
  void* dx32 = dx;
  if (m.bf16) {
    float* d = reinterpret_cast<float*>(buf + bx + by);
    m.widen_to(d, dy, ny);
    dy32 = d;
    dx32 = buf + bx + 2 * by;
    if (q.max) {
      m.widen_to(reinterpret_cast<float*>(buf), kept_x, nx);
      m.widen_to(reinterpret_cast<float*>(buf + bx), kept_y, ny);
    }
  }
  if (q.max) {
    if (m.bf16) {
      x32 = buf;
      y32 = buf + bx;
    }
  } else {
    x32 = buf;   // unread by average pooling (see the top): valid memory of x's extent
    y32 = dy32;  // unread likewise; dy's buffer has y's extent
  }
  check(cudnnPoolingBackward(m.handle, p.pool.get(), &one, p.y.get(), y32, p.y.get(), dy32, p.x.get(), x32,
                             &zero, p.x.get(), dx32),
        "cudnnPoolingBackward", [&] { return pool_name(q, m.act); });
  if (m.bf16) m.round_to(dx, static_cast<const float*>(dx32), nx);
}

}  // namespace baton
