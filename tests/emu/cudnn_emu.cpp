// cudnn_emu: the cuDNN entry points baton calls (src/backend/cuda/cudnn_ops.cpp), on host memory,
// for programs built against the emulated kernels and runtime (tests/emu/emulated_blas.cmake) in
// place of libcudnn. Declarations are the real headers' (cudnn.h, cuDNN 9); the semantics
// implemented are those cuDNN documents for its legacy API, written independently of how
// cudnn_ops.cpp uses them, so that baton's descriptors, alpha / beta, workspace handling, the
// batch-norm statistics conversion and the pooling state are tested -- not cuDNN, and not its
// precision: everything is computed in double and rounded once to the output type (fp32, or
// bf16 round-to-nearest-even through fp32), so the shim is more accurate than the device.
//
// What is modelled:
//  - 4-D NCHW tensors and filters, CUDNN_DATA_FLOAT or CUDNN_DATA_BFLOAT16 (anything else
//    NOT_SUPPORTED); descriptors record their settings; an unset descriptor is BAD_PARAM.
//  - Convolution: CUDNN_CROSS_CORRELATION, dilation 1, compute FLOAT; x, w, y of one type; fp32
//    data with CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION NOT_SUPPORTED. Shapes checked (BAD_PARAM).
//    The heuristics (cudnnGetConvolution*Algorithm_v7) answer a FIXED list per direction, chosen
//    to exercise a caller's filtering, in this order:
//      forward:  FFT (deterministic, 2 GiB workspace), WINOGRAD_NONFUSED (NOT_SUPPORTED),
//                IMPLICIT_PRECOMP_GEMM (deterministic), GEMM (deterministic)
//      bwd data: ALGO_0 (NON_DETERMINISTIC), ALGO_1 (deterministic)
//      bwd filter: FFT (deterministic), ALGO_0 (NON_DETERMINISTIC), ALGO_1 (deterministic),
//                ALGO_3 (NON_DETERMINISTIC)
//    each with mathType = the descriptor's math type and memory = its workspace size, which the
//    Get*WorkspaceSize calls give as well (a function of the shape and algorithm, > 0 except
//    IMPLICIT_GEMM). Executing a listed NOT_SUPPORTED algorithm, one not listed, or any
//    NON_DETERMINISTIC one (baton promises bitwise determinism, so running one is a bug the shim
//    reports), or with less workspace than the query said: BAD_PARAM and a line on stderr. The
//    workspace is overwritten with 0xFF bytes (NaN) on every call: a caller must not keep data
//    there. Every algorithm computes the same exact result.
//  - alpha / beta (host floats): out = alpha * result + beta * out; with beta = 0 the output is
//    not read (cuDNN: "may contain NaN"); the emulated device memory starts as NaN, so a caller
//    that relies on the output being read shows up.
//  - Batch norm: CUDNN_BATCHNORM_SPATIAL only; parameters FLOAT [1, C, 1, 1]. Training: batch
//    mean and biased variance; y normalised with the biased variance; running statistics, when
//    given, updated as documented: running = (1 - factor) * running + factor * stat, with the
//    UNBIASED variance (m / (m - 1), m = N*H*W > 1, else BAD_PARAM) -- computed literally, so
//    garbage in the running buffers with factor 1 gives NaN, as 0 * NaN does; saved mean and
//    saved "inverse variance" = 1 / sqrt(var + eps) when given. Inference with the estimated
//    statistics. Backward: the standard formulas with the saved mean / inverse std when given
//    (else recomputed from x); dx blended with alphaDataDiff / betaDataDiff, dscale / dbias with
//    alphaParamDiff / betaParamDiff.
//  - Pooling: FLOAT tensors only (baton widens bf16; BFLOAT16 is NOT_SUPPORTED here), the four
//    modes, padding smaller than the window (else BAD_PARAM), NaN propagation as set. Max
//    backward: the gradient goes to the first position (row-major in the window) where x equals
//    y -- so y must be the forward's output; average backward reads neither x nor y.
// Not modelled: streams (every call completes on return), other layouts, groups, dilation,
// fused ops, the graph API.
#include <cudnn.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "core/dtype.h"  // the host bf16 conversions (inline)

struct cudnnContext {
  cudaStream_t stream = nullptr;
};
struct cudnnTensorStruct {
  bool set = false;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int n = 0, c = 0, h = 0, w = 0;
};
struct cudnnFilterStruct {
  bool set = false;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int k = 0, c = 0, h = 0, w = 0;
};
struct cudnnConvolutionStruct {
  bool set = false;
  int pad_h = 0, pad_w = 0, u = 1, v = 1;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};
struct cudnnPoolingStruct {
  bool set = false;
  cudnnPoolingMode_t mode = CUDNN_POOLING_MAX;
  bool propagate_nan = false;
  int wh = 0, ww = 0, ph = 0, pw = 0, sh = 1, sw = 1;
};

namespace {

// ---- elements ------------------------------------------------------------------------------
double load(const void* p, cudnnDataType_t t, size_t i) {
  if (t == CUDNN_DATA_BFLOAT16) return baton::bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
  return static_cast<const float*>(p)[i];
}
// bf16: double -> float -> bf16 (a double rounding, as cublas_emu.cpp's, below any bf16 tolerance).
void store(void* p, cudnnDataType_t t, size_t i, double v) {
  if (t == CUDNN_DATA_BFLOAT16)
    static_cast<uint16_t*>(p)[i] = baton::f32_to_bf16(float(v));
  else
    static_cast<float*>(p)[i] = float(v);
}
bool type_ok(cudnnDataType_t t) { return t == CUDNN_DATA_FLOAT || t == CUDNN_DATA_BFLOAT16; }
size_t count(const cudnnTensorStruct& d) { return size_t(d.n) * d.c * d.h * d.w; }

// Reads a whole tensor into doubles / blends a result into one (beta = 0: not read).
std::vector<double> read(const void* p, const cudnnTensorStruct& d) {
  std::vector<double> v(count(d));
  for (size_t i = 0; i < v.size(); i++) v[i] = load(p, d.type, i);
  return v;
}
void blend(void* p, cudnnDataType_t t, const std::vector<double>& r, const void* alpha, const void* beta) {
  const double a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);
  for (size_t i = 0; i < r.size(); i++) store(p, t, i, b == 0.0 ? a * r[i] : a * r[i] + b * load(p, t, i));
}

cudnnStatus_t refuse(cudnnStatus_t st, const char* why) {
  std::fprintf(stderr, "cudnn_emu: %s\n", why);
  return st;
}

// ---- convolution ---------------------------------------------------------------------------
struct Shape {
  int N, C, H, W, K, R, S, P, Q, ph, pw, u, v;
};
// The shape of a convolution from its descriptors; false when they do not fit together.
bool conv_shape(const cudnnTensorStruct* x, const cudnnFilterStruct* w, const cudnnConvolutionStruct* c,
                const cudnnTensorStruct* y, Shape& s) {
  if (x == nullptr || w == nullptr || c == nullptr || y == nullptr) return false;
  if (!x->set || !w->set || !c->set || !y->set) return false;
  if (x->type != w->type || x->type != y->type || x->c != w->c) return false;
  s = Shape{x->n, x->c, x->h, x->w, w->k, w->h, w->w, 0, 0, c->pad_h, c->pad_w, c->u, c->v};
  if (x->h + 2 * s.ph < s.R || x->w + 2 * s.pw < s.S) return false;
  s.P = (x->h + 2 * s.ph - s.R) / s.u + 1;
  s.Q = (x->w + 2 * s.pw - s.S) / s.v + 1;
  return y->n == s.N && y->c == s.K && y->h == s.P && y->w == s.Q;
}
bool math_ok(const cudnnTensorStruct& x, const cudnnConvolutionStruct& c) {
  return !(x.type == CUDNN_DATA_FLOAT && c.math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION);
}
// Visits every (n, k, p, q, c, r, s) term whose input element lies inside the image.
template <typename F>
void each_term(const Shape& s, F f) {
  for (int n = 0; n < s.N; n++)
    for (int k = 0; k < s.K; k++)
      for (int p = 0; p < s.P; p++)
        for (int q = 0; q < s.Q; q++)
          for (int c = 0; c < s.C; c++)
            for (int r = 0; r < s.R; r++) {
              const int h = p * s.u - s.ph + r;
              if (h < 0 || h >= s.H) continue;
              for (int t = 0; t < s.S; t++) {
                const int w = q * s.v - s.pw + t;
                if (w < 0 || w >= s.W) continue;
                f(((size_t(n) * s.K + k) * s.P + p) * s.Q + q, ((size_t(n) * s.C + c) * s.H + h) * s.W + w,
                  ((size_t(k) * s.C + c) * s.R + r) * s.S + t);
              }
            }
}

enum Direction { FWD, BWD_DATA, BWD_FILTER };
struct Listed {
  int algo;
  cudnnStatus_t status;
  cudnnDeterminism_t det;
};
std::vector<Listed> listed(Direction d) {
  switch (d) {
    case FWD:
      return {{CUDNN_CONVOLUTION_FWD_ALGO_FFT, CUDNN_STATUS_SUCCESS, CUDNN_DETERMINISTIC},
              {CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED, CUDNN_STATUS_NOT_SUPPORTED, CUDNN_DETERMINISTIC},
              {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, CUDNN_STATUS_SUCCESS, CUDNN_DETERMINISTIC},
              {CUDNN_CONVOLUTION_FWD_ALGO_GEMM, CUDNN_STATUS_SUCCESS, CUDNN_DETERMINISTIC}};
    case BWD_DATA:
      return {{CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, CUDNN_STATUS_SUCCESS, CUDNN_NON_DETERMINISTIC},
              {CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, CUDNN_STATUS_SUCCESS, CUDNN_DETERMINISTIC}};
    case BWD_FILTER:
      return {{CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT, CUDNN_STATUS_SUCCESS, CUDNN_DETERMINISTIC},
              {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, CUDNN_STATUS_SUCCESS, CUDNN_NON_DETERMINISTIC},
              {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, CUDNN_STATUS_SUCCESS, CUDNN_DETERMINISTIC},
              {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3, CUDNN_STATUS_SUCCESS, CUDNN_NON_DETERMINISTIC}};
  }
  return {};
}
size_t workspace_bytes(Direction d, int algo, const Shape& s) {
  if (d == FWD && algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT) return size_t(2) << 30;
  if (d == FWD && algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM) return 0;
  const size_t y = size_t(s.N) * s.K * s.P * s.Q;
  return (size_t(algo % 3) + 1) * 4 * y + 256 * size_t(d + 1);
}
const Listed* find_listed(Direction d, int algo, std::vector<Listed>& storage) {
  storage = listed(d);
  for (const Listed& l : storage)
    if (l.algo == algo) return &l;
  return nullptr;
}

template <typename Perf, typename Algo>
cudnnStatus_t heuristic(Direction d, const Shape& s, const cudnnConvolutionStruct& c, int requested,
                        int* returned, Perf* perfs) {
  if (returned == nullptr || perfs == nullptr || requested < 1) return CUDNN_STATUS_BAD_PARAM;
  const std::vector<Listed> l = listed(d);
  int n = 0;
  for (const Listed& e : l) {
    if (n == requested) break;
    Perf p{};
    p.algo = Algo(e.algo);
    p.status = e.status;
    p.time = -1.0f;
    p.memory = workspace_bytes(d, e.algo, s);
    p.determinism = e.det;
    p.mathType = c.math;
    perfs[n++] = p;
  }
  *returned = n;
  return CUDNN_STATUS_SUCCESS;
}

// Checks an execution's algorithm and workspace; fills the workspace with NaN bytes.
cudnnStatus_t run_check(Direction d, int algo, const Shape& s, void* ws, size_t ws_bytes) {
  std::vector<Listed> storage;
  const Listed* l = find_listed(d, algo, storage);
  if (l == nullptr || l->status != CUDNN_STATUS_SUCCESS)
    return refuse(CUDNN_STATUS_BAD_PARAM, "an algorithm the heuristic did not offer as usable was executed");
  if (l->det != CUDNN_DETERMINISTIC)
    return refuse(CUDNN_STATUS_BAD_PARAM, "a NON_DETERMINISTIC algorithm was executed");
  const size_t need = workspace_bytes(d, algo, s);
  if (ws_bytes < need || (need > 0 && ws == nullptr))
    return refuse(CUDNN_STATUS_BAD_PARAM, "less workspace than the algorithm needs");
  if (ws != nullptr && ws_bytes > 0) std::memset(ws, 0xFF, ws_bytes);
  return CUDNN_STATUS_SUCCESS;
}

// ---- pooling -------------------------------------------------------------------------------
bool is_max(const cudnnPoolingStruct& p) {
  return p.mode == CUDNN_POOLING_MAX || p.mode == CUDNN_POOLING_MAX_DETERMINISTIC;
}
bool pool_fits(const cudnnPoolingStruct* p, const cudnnTensorStruct* x, const cudnnTensorStruct* y) {
  if (p == nullptr || x == nullptr || y == nullptr || !p->set || !x->set || !y->set) return false;
  if (x->h + 2 * p->ph < p->wh || x->w + 2 * p->pw < p->ww) return false;
  return y->n == x->n && y->c == x->c && y->h == (x->h + 2 * p->ph - p->wh) / p->sh + 1 &&
         y->w == (x->w + 2 * p->pw - p->ww) / p->sw + 1;
}
// Calls f(in_index) for every in-image element of output element (nc, oh, ow)'s window; returns
// the window's full size (padding counted) in `window` and the in-image count in `inside`.
template <typename F>
void each_in_window(const cudnnPoolingStruct& p, const cudnnTensorStruct& x, size_t nc, int oh, int ow, F f) {
  for (int r = 0; r < p.wh; r++) {
    const int h = oh * p.sh - p.ph + r;
    if (h < 0 || h >= x.h) continue;
    for (int t = 0; t < p.ww; t++) {
      const int w = ow * p.sw - p.pw + t;
      if (w < 0 || w >= x.w) continue;
      f((nc * x.h + h) * x.w + w);
    }
  }
}

// ---- batch norm ----------------------------------------------------------------------------
bool bn_fits(const cudnnTensorStruct* x, const cudnnTensorStruct* param) {
  return x != nullptr && param != nullptr && x->set && param->set && param->type == CUDNN_DATA_FLOAT &&
         param->n == 1 && param->c == x->c && param->h == 1 && param->w == 1;
}
bool same(const cudnnTensorStruct* a, const cudnnTensorStruct* b) {
  return a != nullptr && b != nullptr && a->set && b->set && a->type == b->type && a->n == b->n &&
         a->c == b->c && a->h == b->h && a->w == b->w;
}

// ---- convolution, the three directions: they share the shape checks, the heuristic, the workspace
// query and the execution (of x, w, y two are read, the third -- the direction's output -- blended).
template <typename Perf, typename Algo>
cudnnStatus_t offer(Direction d, cudnnHandle_t h, const cudnnTensorStruct* x, const cudnnFilterStruct* w,
                    const cudnnConvolutionStruct* c, const cudnnTensorStruct* y, int requested, int* returned,
                    Perf* perfs) {
  Shape s;
  if (h == nullptr || !conv_shape(x, w, c, y, s)) return CUDNN_STATUS_BAD_PARAM;
  if (!math_ok(*x, *c)) return CUDNN_STATUS_NOT_SUPPORTED;
  return heuristic<Perf, Algo>(d, s, *c, requested, returned, perfs);
}
cudnnStatus_t workspace_of(Direction d, const cudnnTensorStruct* x, const cudnnFilterStruct* w,
                           const cudnnConvolutionStruct* c, const cudnnTensorStruct* y, int algo, size_t* bytes) {
  Shape s;
  if (!conv_shape(x, w, c, y, s) || bytes == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *bytes = workspace_bytes(d, algo, s);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t convolve(Direction d, cudnnHandle_t h, const void* alpha, const void* beta, const cudnnTensorStruct* xd,
                       const void* x, const cudnnFilterStruct* wd, const void* w, const cudnnConvolutionStruct* cd,
                       int algo, void* ws, size_t ws_bytes, const cudnnTensorStruct* yd, const void* y, void* out) {
  Shape s;
  if (h == nullptr || !conv_shape(xd, wd, cd, yd, s) || x == nullptr || w == nullptr || y == nullptr)
    return CUDNN_STATUS_BAD_PARAM;
  if (!math_ok(*xd, *cd)) return CUDNN_STATUS_NOT_SUPPORTED;
  if (const cudnnStatus_t st = run_check(d, algo, s, ws, ws_bytes); st != CUDNN_STATUS_SUCCESS) return st;
  // The output is not read unless beta != 0 (blend), so it is not loaded here.
  std::vector<double> xv(count(*xd)), wv(size_t(s.K) * s.C * s.R * s.S), yv(count(*yd));
  for (size_t i = 0; d != BWD_DATA && i < xv.size(); i++) xv[i] = load(x, xd->type, i);
  for (size_t i = 0; d != BWD_FILTER && i < wv.size(); i++) wv[i] = load(w, wd->type, i);
  for (size_t i = 0; d != FWD && i < yv.size(); i++) yv[i] = load(y, yd->type, i);
  std::vector<double> r(d == FWD ? yv.size() : d == BWD_DATA ? xv.size() : wv.size(), 0.0);
  each_term(s, [&](size_t yi, size_t xi, size_t wi) {
    if (d == FWD) r[yi] += xv[xi] * wv[wi];
    if (d == BWD_DATA) r[xi] += yv[yi] * wv[wi];
    if (d == BWD_FILTER) r[wi] += yv[yi] * xv[xi];
  });
  blend(out, d == FWD ? yd->type : d == BWD_DATA ? xd->type : wd->type, r, alpha, beta);
  return CUDNN_STATUS_SUCCESS;
}
// Every descriptor kind is created default (unset) and destroyed the same way.
template <typename T>
cudnnStatus_t make(T** d) {
  if (d == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *d = new T;
  return CUDNN_STATUS_SUCCESS;
}
template <typename T>
cudnnStatus_t drop(T* d) {
  delete d;
  return CUDNN_STATUS_SUCCESS;
}
}  // namespace

extern "C" {

// ---- library -----------------------------------------------------------------------------------
size_t cudnnGetVersion(void) { return CUDNN_VERSION; }
const char* cudnnGetErrorString(cudnnStatus_t status) {
  switch (CUDNN_STATUS_CATEGORY(status)) {
    case 0: return "CUDNN_STATUS_SUCCESS";
    case 2000: return "CUDNN_STATUS_BAD_PARAM (cudnn_emu)";
    case 3000: return "CUDNN_STATUS_NOT_SUPPORTED (cudnn_emu)";
    default: return "CUDNN_STATUS_INTERNAL_ERROR (cudnn_emu)";
  }
}
cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) { return make(handle); }
cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) { return drop(handle); }
cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  handle->stream = stream;
  return CUDNN_STATUS_SUCCESS;
}

// ---- descriptors -------------------------------------------------------------------------------
cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* d) { return make(d); }
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d) { return drop(d); }
cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t format,
                                         cudnnDataType_t type, int n, int c, int h, int w) {
  if (d == nullptr || n <= 0 || c <= 0 || h <= 0 || w <= 0) return CUDNN_STATUS_BAD_PARAM;
  if (format != CUDNN_TENSOR_NCHW || !type_ok(type)) return CUDNN_STATUS_NOT_SUPPORTED;
  *d = cudnnTensorStruct{true, type, n, c, h, w};
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* d) { return make(d); }
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d) { return drop(d); }
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t type, cudnnTensorFormat_t format,
                                         int k, int c, int h, int w) {
  if (d == nullptr || k <= 0 || c <= 0 || h <= 0 || w <= 0) return CUDNN_STATUS_BAD_PARAM;
  if (format != CUDNN_TENSOR_NCHW || !type_ok(type)) return CUDNN_STATUS_NOT_SUPPORTED;
  *d = cudnnFilterStruct{true, type, k, c, h, w};
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t* d) { return make(d); }
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d) { return drop(d); }
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int pad_h, int pad_w, int u, int v,
                                              int dilation_h, int dilation_w, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t compute) {
  if (d == nullptr || pad_h < 0 || pad_w < 0 || u <= 0 || v <= 0 || dilation_h <= 0 || dilation_w <= 0)
    return CUDNN_STATUS_BAD_PARAM;
  if (mode != CUDNN_CROSS_CORRELATION || dilation_h != 1 || dilation_w != 1 || compute != CUDNN_DATA_FLOAT)
    return CUDNN_STATUS_NOT_SUPPORTED;
  const cudnnMathType_t math = d->math;
  *d = cudnnConvolutionStruct{true, pad_h, pad_w, u, v, math};
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t math) {
  if (d == nullptr) return CUDNN_STATUS_BAD_PARAM;
  d->math = math;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(const cudnnConvolutionDescriptor_t c,
                                                    const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t w,
                                                    int* n, int* k, int* h, int* ww) {
  if (c == nullptr || x == nullptr || w == nullptr || !c->set || !x->set || !w->set || x->c != w->c)
    return CUDNN_STATUS_BAD_PARAM;
  if (x->h + 2 * c->pad_h < w->h || x->w + 2 * c->pad_w < w->w) return CUDNN_STATUS_BAD_PARAM;
  *n = x->n;
  *k = w->k;
  *h = (x->h + 2 * c->pad_h - w->h) / c->u + 1;
  *ww = (x->w + 2 * c->pad_w - w->w) / c->v + 1;
  return CUDNN_STATUS_SUCCESS;
}

// ---- convolutions ------------------------------------------------------------------------------

cudnnStatus_t cudnnGetConvolutionForwardAlgorithmMaxCount(cudnnHandle_t, int* count) {
  *count = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithmMaxCount(cudnnHandle_t, int* count) {
  *count = CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(cudnnHandle_t, int* count) {
  *count = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t h, const cudnnTensorDescriptor_t x,
                                                     const cudnnFilterDescriptor_t w,
                                                     const cudnnConvolutionDescriptor_t c,
                                                     const cudnnTensorDescriptor_t y, const int requested,
                                                     int* returned, cudnnConvolutionFwdAlgoPerf_t* perfs) {
  return offer<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(FWD, h, x, w, c, y, requested, returned,
                                                                         perfs);
}
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t h, const cudnnFilterDescriptor_t w,
                                                          const cudnnTensorDescriptor_t dy,
                                                          const cudnnConvolutionDescriptor_t c,
                                                          const cudnnTensorDescriptor_t dx, const int requested,
                                                          int* returned, cudnnConvolutionBwdDataAlgoPerf_t* perfs) {
  return offer<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(BWD_DATA, h, dx, w, c, dy,
                                                                                 requested, returned, perfs);
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t h, const cudnnTensorDescriptor_t x,
                                                            const cudnnTensorDescriptor_t dy,
                                                            const cudnnConvolutionDescriptor_t c,
                                                            const cudnnFilterDescriptor_t dw, const int requested,
                                                            int* returned,
                                                            cudnnConvolutionBwdFilterAlgoPerf_t* perfs) {
  return offer<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(BWD_FILTER, h, x, dw, c, dy,
                                                                                     requested, returned, perfs);
}
cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t, const cudnnTensorDescriptor_t x,
                                                      const cudnnFilterDescriptor_t w,
                                                      const cudnnConvolutionDescriptor_t c,
                                                      const cudnnTensorDescriptor_t y, cudnnConvolutionFwdAlgo_t algo,
                                                      size_t* bytes) {
  return workspace_of(FWD, x, w, c, y, algo, bytes);
}
cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t, const cudnnFilterDescriptor_t w,
                                                           const cudnnTensorDescriptor_t dy,
                                                           const cudnnConvolutionDescriptor_t c,
                                                           const cudnnTensorDescriptor_t dx,
                                                           cudnnConvolutionBwdDataAlgo_t algo, size_t* bytes) {
  return workspace_of(BWD_DATA, dx, w, c, dy, algo, bytes);
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t, const cudnnTensorDescriptor_t x,
                                                             const cudnnTensorDescriptor_t dy,
                                                             const cudnnConvolutionDescriptor_t c,
                                                             const cudnnFilterDescriptor_t dw,
                                                             cudnnConvolutionBwdFilterAlgo_t algo, size_t* bytes) {
  return workspace_of(BWD_FILTER, x, dw, c, dy, algo, bytes);
}
cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t h, const void* alpha, const cudnnTensorDescriptor_t xd,
                                      const void* x, const cudnnFilterDescriptor_t wd, const void* w,
                                      const cudnnConvolutionDescriptor_t cd, cudnnConvolutionFwdAlgo_t algo,
                                      void* ws, size_t ws_bytes, const void* beta,
                                      const cudnnTensorDescriptor_t yd, void* y) {
  return convolve(FWD, h, alpha, beta, xd, x, wd, w, cd, algo, ws, ws_bytes, yd, y, y);
}
cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t h, const void* alpha, const cudnnFilterDescriptor_t wd,
                                           const void* w, const cudnnTensorDescriptor_t dyd, const void* dy,
                                           const cudnnConvolutionDescriptor_t cd, cudnnConvolutionBwdDataAlgo_t algo,
                                           void* ws, size_t ws_bytes, const void* beta,
                                           const cudnnTensorDescriptor_t dxd, void* dx) {
  return convolve(BWD_DATA, h, alpha, beta, dxd, dx, wd, w, cd, algo, ws, ws_bytes, dyd, dy, dx);
}
cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t h, const void* alpha, const cudnnTensorDescriptor_t xd,
                                             const void* x, const cudnnTensorDescriptor_t dyd, const void* dy,
                                             const cudnnConvolutionDescriptor_t cd,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void* ws, size_t ws_bytes,
                                             const void* beta, const cudnnFilterDescriptor_t dwd, void* dw) {
  return convolve(BWD_FILTER, h, alpha, beta, xd, x, dwd, dw, cd, algo, ws, ws_bytes, dyd, dy, dw);
}

// ---- batch norm ----------------------------------------------------------------------------------
cudnnStatus_t cudnnBatchNormalizationForwardTraining(
    cudnnHandle_t h, cudnnBatchNormMode_t mode, const void* alpha, const void* beta,
    const cudnnTensorDescriptor_t xd, const void* x, const cudnnTensorDescriptor_t yd, void* y,
    const cudnnTensorDescriptor_t pd, const void* scale, const void* bias, double factor, void* running_mean,
    void* running_var, double eps, void* saved_mean, void* saved_inv) {
  if (h == nullptr || !same(xd, yd) || !bn_fits(xd, pd) || x == nullptr || y == nullptr || scale == nullptr ||
      bias == nullptr || eps < CUDNN_BN_MIN_EPSILON || (running_mean == nullptr) != (running_var == nullptr) ||
      (saved_mean == nullptr) != (saved_inv == nullptr))
    return CUDNN_STATUS_BAD_PARAM;
  if (mode != CUDNN_BATCHNORM_SPATIAL) return CUDNN_STATUS_NOT_SUPPORTED;
  const int N = xd->n, C = xd->c, HW = xd->h * xd->w;
  const double m = double(N) * HW;
  if (m < 2) return refuse(CUDNN_STATUS_BAD_PARAM, "batch norm training over one value (unbiased variance)");
  const std::vector<double> xv = read(x, *xd);
  std::vector<double> out(xv.size());
  const float* g = static_cast<const float*>(scale);
  const float* b = static_cast<const float*>(bias);
  for (int c = 0; c < C; c++) {
    double mean = 0, var = 0;
    for (int n = 0; n < N; n++)
      for (int i = 0; i < HW; i++) mean += xv[(size_t(n) * C + c) * HW + i];
    mean /= m;
    for (int n = 0; n < N; n++)
      for (int i = 0; i < HW; i++) {
        const double d = xv[(size_t(n) * C + c) * HW + i] - mean;
        var += d * d;
      }
    var /= m;
    const double inv = 1.0 / std::sqrt(var + eps);
    for (int n = 0; n < N; n++)
      for (int i = 0; i < HW; i++) {
        const size_t k = (size_t(n) * C + c) * HW + i;
        out[k] = (xv[k] - mean) * inv * g[c] + b[c];
      }
    if (running_mean != nullptr) {
      float* rm = static_cast<float*>(running_mean);
      float* rv = static_cast<float*>(running_var);
      rm[c] = float((1.0 - factor) * rm[c] + factor * mean);
      rv[c] = float((1.0 - factor) * rv[c] + factor * var * m / (m - 1.0));
    }
    if (saved_mean != nullptr) {
      static_cast<float*>(saved_mean)[c] = float(mean);
      static_cast<float*>(saved_inv)[c] = float(inv);
    }
  }
  blend(y, yd->type, out, alpha, beta);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBatchNormalizationForwardInference(cudnnHandle_t h, cudnnBatchNormMode_t mode, const void* alpha,
                                                      const void* beta, const cudnnTensorDescriptor_t xd,
                                                      const void* x, const cudnnTensorDescriptor_t yd, void* y,
                                                      const cudnnTensorDescriptor_t pd, const void* scale,
                                                      const void* bias, const void* est_mean, const void* est_var,
                                                      double eps) {
  if (h == nullptr || !same(xd, yd) || !bn_fits(xd, pd) || x == nullptr || y == nullptr || scale == nullptr ||
      bias == nullptr || est_mean == nullptr || est_var == nullptr || eps < CUDNN_BN_MIN_EPSILON)
    return CUDNN_STATUS_BAD_PARAM;
  if (mode != CUDNN_BATCHNORM_SPATIAL) return CUDNN_STATUS_NOT_SUPPORTED;
  const int N = xd->n, C = xd->c, HW = xd->h * xd->w;
  const float *g = static_cast<const float*>(scale), *b = static_cast<const float*>(bias);
  const float *mu = static_cast<const float*>(est_mean), *var = static_cast<const float*>(est_var);
  const std::vector<double> xv = read(x, *xd);
  std::vector<double> out(xv.size());
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++)
      for (int i = 0; i < HW; i++) {
        const size_t k = (size_t(n) * C + c) * HW + i;
        out[k] = (xv[k] - mu[c]) / std::sqrt(double(var[c]) + eps) * g[c] + b[c];
      }
  blend(y, yd->type, out, alpha, beta);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBatchNormalizationBackward(cudnnHandle_t h, cudnnBatchNormMode_t mode, const void* alpha_data,
                                              const void* beta_data, const void* alpha_param, const void* beta_param,
                                              const cudnnTensorDescriptor_t xd, const void* x,
                                              const cudnnTensorDescriptor_t dyd, const void* dy,
                                              const cudnnTensorDescriptor_t dxd, void* dx,
                                              const cudnnTensorDescriptor_t pd, const void* scale, void* dscale,
                                              void* dbias, double eps, const void* saved_mean,
                                              const void* saved_inv) {
  if (h == nullptr || !same(xd, dyd) || !same(xd, dxd) || !bn_fits(xd, pd) || x == nullptr || dy == nullptr ||
      dx == nullptr || scale == nullptr || dscale == nullptr || dbias == nullptr || eps < CUDNN_BN_MIN_EPSILON ||
      (saved_mean == nullptr) != (saved_inv == nullptr))
    return CUDNN_STATUS_BAD_PARAM;
  if (mode != CUDNN_BATCHNORM_SPATIAL) return CUDNN_STATUS_NOT_SUPPORTED;
  const int N = xd->n, C = xd->c, HW = xd->h * xd->w;
  const double m = double(N) * HW;
  const std::vector<double> xv = read(x, *xd), dyv = read(dy, *dyd);
  std::vector<double> out(xv.size()), dg(static_cast<size_t>(C)), db(static_cast<size_t>(C));
  const float* g = static_cast<const float*>(scale);
  for (int c = 0; c < C; c++) {
    double mean, inv;
    if (saved_mean != nullptr) {
      mean = static_cast<const float*>(saved_mean)[c];
      inv = static_cast<const float*>(saved_inv)[c];
    } else {
      double s = 0, v = 0;
      for (int n = 0; n < N; n++)
        for (int i = 0; i < HW; i++) s += xv[(size_t(n) * C + c) * HW + i];
      mean = s / m;
      for (int n = 0; n < N; n++)
        for (int i = 0; i < HW; i++) {
          const double d = xv[(size_t(n) * C + c) * HW + i] - mean;
          v += d * d;
        }
      inv = 1.0 / std::sqrt(v / m + eps);
    }
    double sum_dy = 0, sum_dy_xhat = 0;
    for (int n = 0; n < N; n++)
      for (int i = 0; i < HW; i++) {
        const size_t k = (size_t(n) * C + c) * HW + i;
        sum_dy += dyv[k];
        sum_dy_xhat += dyv[k] * (xv[k] - mean) * inv;
      }
    for (int n = 0; n < N; n++)
      for (int i = 0; i < HW; i++) {
        const size_t k = (size_t(n) * C + c) * HW + i;
        const double xhat = (xv[k] - mean) * inv;
        out[k] = g[c] * inv / m * (m * dyv[k] - sum_dy - xhat * sum_dy_xhat);
      }
    dg[size_t(c)] = sum_dy_xhat;
    db[size_t(c)] = sum_dy;
  }
  blend(dx, dxd->type, out, alpha_data, beta_data);
  blend(dscale, CUDNN_DATA_FLOAT, dg, alpha_param, beta_param);
  blend(dbias, CUDNN_DATA_FLOAT, db, alpha_param, beta_param);
  return CUDNN_STATUS_SUCCESS;
}

// ---- pooling -------------------------------------------------------------------------------------
cudnnStatus_t cudnnCreatePoolingDescriptor(cudnnPoolingDescriptor_t* d) { return make(d); }
cudnnStatus_t cudnnDestroyPoolingDescriptor(cudnnPoolingDescriptor_t d) { return drop(d); }
cudnnStatus_t cudnnSetPooling2dDescriptor(cudnnPoolingDescriptor_t d, cudnnPoolingMode_t mode,
                                          cudnnNanPropagation_t nan, int wh, int ww, int ph, int pw, int sh, int sw) {
  if (d == nullptr || wh <= 0 || ww <= 0 || ph < 0 || pw < 0 || sh <= 0 || sw <= 0 || ph >= wh || pw >= ww)
    return CUDNN_STATUS_BAD_PARAM;
  *d = cudnnPoolingStruct{true, mode, nan == CUDNN_PROPAGATE_NAN, wh, ww, ph, pw, sh, sw};
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetPooling2dForwardOutputDim(const cudnnPoolingDescriptor_t p, const cudnnTensorDescriptor_t x,
                                                int* n, int* c, int* h, int* w) {
  if (p == nullptr || x == nullptr || !p->set || !x->set || x->h + 2 * p->ph < p->wh || x->w + 2 * p->pw < p->ww)
    return CUDNN_STATUS_BAD_PARAM;
  *n = x->n;
  *c = x->c;
  *h = (x->h + 2 * p->ph - p->wh) / p->sh + 1;
  *w = (x->w + 2 * p->pw - p->ww) / p->sw + 1;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnPoolingForward(cudnnHandle_t h, const cudnnPoolingDescriptor_t pd, const void* alpha,
                                  const cudnnTensorDescriptor_t xd, const void* x, const void* beta,
                                  const cudnnTensorDescriptor_t yd, void* y) {
  if (h == nullptr || !pool_fits(pd, xd, yd) || x == nullptr || y == nullptr) return CUDNN_STATUS_BAD_PARAM;
  if (xd->type != CUDNN_DATA_FLOAT || yd->type != CUDNN_DATA_FLOAT) return CUDNN_STATUS_NOT_SUPPORTED;
  const cudnnPoolingStruct& p = *pd;
  const std::vector<double> xv = read(x, *xd);
  std::vector<double> out(count(*yd));
  for (size_t nc = 0; nc < size_t(yd->n) * yd->c; nc++)
    for (int oh = 0; oh < yd->h; oh++)
      for (int ow = 0; ow < yd->w; ow++) {
        double acc = is_max(p) ? -std::numeric_limits<double>::infinity() : 0.0;
        int inside = 0;
        bool nan = false;
        each_in_window(p, *xd, nc, oh, ow, [&](size_t i) {
          inside++;
          if (std::isnan(xv[i])) nan = true;
          if (is_max(p)) {
            if (xv[i] > acc) acc = xv[i];
          } else {
            acc += xv[i];
          }
        });
        if (!is_max(p))
          acc /= p.mode == CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING ? double(p.wh) * p.ww : double(inside);
        if (nan && (p.propagate_nan || !is_max(p))) acc = std::numeric_limits<double>::quiet_NaN();
        out[(nc * yd->h + oh) * yd->w + ow] = acc;
      }
  blend(y, yd->type, out, alpha, beta);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnPoolingBackward(cudnnHandle_t h, const cudnnPoolingDescriptor_t pd, const void* alpha,
                                   const cudnnTensorDescriptor_t yd, const void* y, const cudnnTensorDescriptor_t dyd,
                                   const void* dy, const cudnnTensorDescriptor_t xd, const void* x, const void* beta,
                                   const cudnnTensorDescriptor_t dxd, void* dx) {
  if (h == nullptr || !pool_fits(pd, xd, yd) || !same(yd, dyd) || !same(xd, dxd) || y == nullptr ||
      dy == nullptr || x == nullptr || dx == nullptr)
    return CUDNN_STATUS_BAD_PARAM;
  if (xd->type != CUDNN_DATA_FLOAT || yd->type != CUDNN_DATA_FLOAT) return CUDNN_STATUS_NOT_SUPPORTED;
  const cudnnPoolingStruct& p = *pd;
  const std::vector<double> dyv = read(dy, *dyd);
  std::vector<double> xv, yv;
  if (is_max(p)) {  // average pooling's gradient needs neither (not read, as on the device)
    xv = read(x, *xd);
    yv = read(y, *yd);
  }
  std::vector<double> out(count(*dxd), 0.0);
  for (size_t nc = 0; nc < size_t(yd->n) * yd->c; nc++)
    for (int oh = 0; oh < yd->h; oh++)
      for (int ow = 0; ow < yd->w; ow++) {
        const size_t o = (nc * yd->h + oh) * yd->w + ow;
        if (is_max(p)) {
          bool done = false;
          each_in_window(p, *xd, nc, oh, ow, [&](size_t i) {
            if (!done && (xv[i] == yv[o] || (std::isnan(xv[i]) && std::isnan(yv[o])))) {
              out[i] += dyv[o];
              done = true;
            }
          });
        } else {
          int inside = 0;
          each_in_window(p, *xd, nc, oh, ow, [&](size_t) { inside++; });
          const double div = p.mode == CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING ? double(p.wh) * p.ww : inside;
          each_in_window(p, *xd, nc, oh, ow, [&](size_t i) { out[i] += dyv[o] / div; });
        }
      }
  blend(dx, dxd->type, out, alpha, beta);
  return CUDNN_STATUS_SUCCESS;
}

}  // extern "C"

// ==== the graph API (cudnn_graph.h backend descriptors) ==========================================
// The subset baton's fused attention builds (src/backend/cuda/cudnn_sdpa.cpp), interpreted
// generically from what the cuDNN Backend API reference says each descriptor and attribute means
// -- not by recognising the attention pattern -- so that wrong strides, a wrong mask, scale or
// statistics convention give wrong numbers:
//  - TENSOR: data type FLOAT, BFLOAT16, INT32 or BOOLEAN (BOOLEAN only virtual), 1-8 dims, strides,
//    uid, virtual, by value (a host scalar in the variant pack: FLOAT or INT32, every dim 1);
//    alignment recorded. A non-virtual tensor is a strided view of the pointer the variant pack
//    gives its uid (the same pointer + offset may back several views: qkv's Q, K, V). A virtual
//    tensor's values are rounded to its data type when produced (bf16 round to nearest even, fp32,
//    int32, bool), as a device kernel storing that type would.
//  - POINTWISE (operation: PW_DESCRIPTOR, X, B, T, Y; ALPHA1/2 refused): ADD, SUB, MUL, DIV, MAX,
//    MIN, EXP, LOG (natural), IDENTITY, CMP_EQ/NEQ/GT/GE/LT/LE (true = 1), GEN_INDEX (the output
//    position's index along AXIS; X gives only the shape), BINARY_SELECT (y = t ? x : b). X has Y's
//    dims; B and T may broadcast (each dim 1 or Y's). Other modes NOT_SUPPORTED.
//  - REDUCTION (operator ADD or MAX, comp type FLOAT): Y's dims each 1 (reduced) or X's.
//  - MATMUL (comp type FLOAT; M/N/K overrides refused): C[..., m, n] = sum_k A[..., m, k] B[..., k, n]
//    over the last two dims, the leading (batch) dims of A and B each 1 or C's.
//  - RESHAPE: a view -- Y's element at its (dims, strides) position is X's element at the same
//    memory offset (cuDNN's default "view-only" reshape; the frontend transposes with it); every
//    offset Y reads must be one X has (else BAD_PARAM); the value is rounded to Y's type.
//  - OPERATIONGRAPH: the ops run in dependency order; a virtual tensor must have exactly one
//    producer, a graph must not read a virtual tensor nobody produces, no cycles (BAD_PARAM).
//  - ENGINEHEUR (modes A, B, INSTANT, FALLBACK): two engine configs, in this order, to exercise a
//    caller's filtering: engine 0 carries NUMERICAL_NOTE_NONDETERMINISTIC (finalizing a plan of it
//    works, executing it is BAD_PARAM: baton promises bitwise determinism), engine 1 is
//    deterministic (BEHAVIOR_NOTE_RUNTIME_COMPILATION) and needs a workspace of 1 KiB per operation,
//    which the shim overwrites with 0xFF on every execution. BATON_CUDNN_EMU_NO_ENGINES=1 makes the
//    heuristics' finalize fail NOT_SUPPORTED (a graph no engine supports).
//  - EXECUTION_PLAN, VARIANT_PACK (uids, pointers, workspace), cudnnBackendExecute: every
//    non-virtual uid of the graph must be in the pack, with a workspace when one is needed.
//  - cudnnGetLastErrorString: the last refusal's message.
// Everything is computed in double and rounded once per stored tensor. Not modelled: other
// descriptor types and attributes (NOT_SUPPORTED with a line on stderr), knobs, dynamic shapes,
// CUDA graphs, the documented engine limits (head sizes, layouts: the shim runs any graph it can
// interpret, so those limits are checked on a device, tests/gpu/test_cudnn_sdpa.cpp).
#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>

namespace {

thread_local std::string g_last_error;

cudnnStatus_t graph_refuse(cudnnStatus_t st, const std::string& why) {
  g_last_error = why;
  std::fprintf(stderr, "cudnn_emu: %s\n", why.c_str());
  return st;
}

// One attribute as set: its type and its elements' bytes.
struct Attr {
  cudnnBackendAttributeType_t type;
  int64_t count = 0;
  std::vector<unsigned char> bytes;
  template <typename T>
  T at(int64_t i) const {
    T v;
    std::memcpy(&v, bytes.data() + size_t(i) * sizeof(T), sizeof(T));
    return v;
  }
};

size_t element_size(cudnnBackendAttributeType_t t) {
  switch (t) {
    case CUDNN_TYPE_HANDLE: return sizeof(cudnnHandle_t);
    case CUDNN_TYPE_DATA_TYPE: return sizeof(cudnnDataType_t);
    case CUDNN_TYPE_BOOLEAN: return sizeof(bool);
    case CUDNN_TYPE_INT64: return sizeof(int64_t);
    case CUDNN_TYPE_FLOAT: return sizeof(float);
    case CUDNN_TYPE_DOUBLE: return sizeof(double);
    case CUDNN_TYPE_VOID_PTR: return sizeof(void*);
    case CUDNN_TYPE_HEUR_MODE: return sizeof(cudnnBackendHeurMode_t);
    case CUDNN_TYPE_NUMERICAL_NOTE: return sizeof(cudnnBackendNumericalNote_t);
    case CUDNN_TYPE_POINTWISE_MODE: return sizeof(cudnnPointwiseMode_t);
    case CUDNN_TYPE_BACKEND_DESCRIPTOR: return sizeof(cudnnBackendDescriptor_t);
    case CUDNN_TYPE_REDUCTION_OPERATOR_TYPE: return sizeof(cudnnReduceTensorOp_t);
    default: return 0;
  }
}

struct GTensor {
  int64_t uid = 0;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  std::vector<int64_t> dims, strides;
  bool is_virtual = false, by_value = false;
  size_t count() const {
    size_t n = 1;
    for (int64_t d : dims) n *= size_t(d);
    return n;
  }
  bool same(const GTensor& o) const {
    return type == o.type && dims == o.dims && strides == o.strides && is_virtual == o.is_virtual &&
           by_value == o.by_value;
  }
};

enum class OpKind { POINTWISE, REDUCTION, MATMUL, RESHAPE };
struct GOp {
  OpKind kind;
  cudnnPointwiseMode_t pw = CUDNN_POINTWISE_ADD;
  cudnnReduceTensorOp_t red = CUDNN_REDUCE_TENSOR_ADD;
  int64_t axis = -1;
  std::vector<GTensor> in;  // pointwise: x[, b[, t]]; reduction: x; matmul: a, b; reshape: x
  GTensor out;
};

struct GGraph {
  std::vector<GOp> ops;                       // in execution order
  std::map<int64_t, GTensor> non_virtual;     // uid -> tensor (inputs, outputs, by-value scalars)
  int64_t workspace = 0;                      // engine 1's
};

struct Desc {
  explicit Desc(cudnnBackendDescriptorType_t t) : type(t) {}
  cudnnBackendDescriptorType_t type;
  bool finalized = false;
  std::map<int, Attr> attrs;
  GTensor tensor;                   // TENSOR
  GOp op;                           // OPERATION_*
  cudnnPointwiseMode_t pw_mode{};   // POINTWISE
  int64_t pw_axis = -1;
  cudnnReduceTensorOp_t red_op{};   // REDUCTION
  std::shared_ptr<GGraph> graph;    // OPERATIONGRAPH, ENGINEHEUR, ENGINE, ENGINECFG, EXECUTION_PLAN
  int64_t engine = -1;              // ENGINE, ENGINECFG, EXECUTION_PLAN
  std::vector<int64_t> uids;        // VARIANT_PACK
  std::vector<void*> ptrs;
  void* workspace = nullptr;

  const Attr* find(int a) const {
    auto it = attrs.find(a);
    return it == attrs.end() ? nullptr : &it->second;
  }
  template <typename T>
  bool get(int a, T& v) const {
    const Attr* at = find(a);
    if (at == nullptr || at->count < 1) return false;
    v = at->template at<T>(0);
    return true;
  }
  // A finalized descriptor of `want` set as attribute `a`.
  Desc* desc(int a, cudnnBackendDescriptorType_t want) const {
    cudnnBackendDescriptor_t d = nullptr;
    if (!get(a, d) || d == nullptr) return nullptr;
    Desc* r = static_cast<Desc*>(d);
    return r->type == want && r->finalized ? r : nullptr;
  }
};

constexpr int64_t kEngines = 2;  // 0 non-deterministic, 1 deterministic
constexpr int64_t kNondeterministicEngine = 0;

// ---- tensors: values in logical row-major order ------------------------------------------------
size_t offset_of(const GTensor& t, size_t linear) {
  size_t off = 0;
  for (size_t d = t.dims.size(); d-- > 0;) {
    const size_t i = linear % size_t(t.dims[d]);
    linear /= size_t(t.dims[d]);
    off += i * size_t(t.strides[d]);
  }
  return off;
}
double round_to(cudnnDataType_t t, double v) {
  switch (t) {
    case CUDNN_DATA_BFLOAT16: return baton::bf16_to_f32(baton::f32_to_bf16(float(v)));
    case CUDNN_DATA_INT32: return double(int32_t(v));
    case CUDNN_DATA_BOOLEAN: return v != 0.0 ? 1.0 : 0.0;
    default: return double(float(v));
  }
}
double load_elem(const void* base, cudnnDataType_t t, size_t off) {
  switch (t) {
    case CUDNN_DATA_BFLOAT16: return baton::bf16_to_f32(static_cast<const uint16_t*>(base)[off]);
    case CUDNN_DATA_INT32: return static_cast<const int32_t*>(base)[off];
    default: return static_cast<const float*>(base)[off];
  }
}
void store_elem(void* base, cudnnDataType_t t, size_t off, double v) {
  switch (t) {
    case CUDNN_DATA_BFLOAT16: static_cast<uint16_t*>(base)[off] = baton::f32_to_bf16(float(v)); break;
    case CUDNN_DATA_INT32: static_cast<int32_t*>(base)[off] = int32_t(v); break;
    default: static_cast<float*>(base)[off] = float(v); break;
  }
}
// The multi-index of `linear` in dims; and the linear index in `dims_b` of the same position,
// broadcast (a dim of 1 in b takes index 0).
size_t broadcast_index(const std::vector<int64_t>& dims_y, const std::vector<int64_t>& dims_b, size_t linear) {
  size_t out = 0, mul = 1;
  for (size_t d = dims_y.size(); d-- > 0;) {
    const size_t i = linear % size_t(dims_y[d]);
    linear /= size_t(dims_y[d]);
    out += (dims_b[d] == 1 ? 0 : i) * mul;
    mul *= size_t(dims_b[d]);
  }
  return out;
}
bool broadcastable(const GTensor& b, const GTensor& y) {
  if (b.dims.size() != y.dims.size()) return false;
  for (size_t d = 0; d < b.dims.size(); d++)
    if (b.dims[d] != 1 && b.dims[d] != y.dims[d]) return false;
  return true;
}

cudnnStatus_t finalize_tensor(Desc& d) {
  GTensor& t = d.tensor;
  const Attr* dims = d.find(CUDNN_ATTR_TENSOR_DIMENSIONS);
  const Attr* strides = d.find(CUDNN_ATTR_TENSOR_STRIDES);
  if (!d.get(CUDNN_ATTR_TENSOR_DATA_TYPE, t.type) || dims == nullptr || strides == nullptr ||
      !d.get(CUDNN_ATTR_TENSOR_UNIQUE_ID, t.uid))
    return graph_refuse(CUDNN_STATUS_BAD_PARAM, "tensor: data type, dimensions, strides and unique id are required");
  if (dims->count != strides->count || dims->count < 1 || dims->count > 8)
    return graph_refuse(CUDNN_STATUS_BAD_PARAM, "tensor: dimensions and strides must have the same 1-8 elements");
  for (int64_t i = 0; i < dims->count; i++) {
    t.dims.push_back(dims->at<int64_t>(i));
    t.strides.push_back(strides->at<int64_t>(i));
    if (t.dims.back() < 1 || t.strides.back() < 0)
      return graph_refuse(CUDNN_STATUS_BAD_PARAM, "tensor: a dimension < 1 or a negative stride");
  }
  d.get(CUDNN_ATTR_TENSOR_IS_VIRTUAL, t.is_virtual);
  d.get(CUDNN_ATTR_TENSOR_IS_BY_VALUE, t.by_value);
  if (t.type != CUDNN_DATA_FLOAT && t.type != CUDNN_DATA_BFLOAT16 && t.type != CUDNN_DATA_INT32 &&
      t.type != CUDNN_DATA_BOOLEAN)
    return graph_refuse(CUDNN_STATUS_NOT_SUPPORTED, "tensor: data type not modelled (FLOAT, BFLOAT16, INT32, BOOLEAN)");
  if (t.type == CUDNN_DATA_BOOLEAN && !t.is_virtual)
    return graph_refuse(CUDNN_STATUS_NOT_SUPPORTED, "tensor: a non-virtual BOOLEAN tensor is not modelled");
  if (t.by_value && (t.is_virtual || t.count() != 1 || t.type == CUDNN_DATA_BFLOAT16))
    return graph_refuse(CUDNN_STATUS_NOT_SUPPORTED, "tensor: by-value tensors are non-virtual FLOAT/INT32 scalars here");
  return CUDNN_STATUS_SUCCESS;
}

bool binary_mode(cudnnPointwiseMode_t m) {
  switch (m) {
    case CUDNN_POINTWISE_ADD: case CUDNN_POINTWISE_SUB: case CUDNN_POINTWISE_MUL: case CUDNN_POINTWISE_DIV:
    case CUDNN_POINTWISE_MAX: case CUDNN_POINTWISE_MIN: case CUDNN_POINTWISE_CMP_EQ:
    case CUDNN_POINTWISE_CMP_NEQ: case CUDNN_POINTWISE_CMP_GT: case CUDNN_POINTWISE_CMP_GE:
    case CUDNN_POINTWISE_CMP_LT: case CUDNN_POINTWISE_CMP_LE: case CUDNN_POINTWISE_BINARY_SELECT:
      return true;
    default: return false;
  }
}
bool modelled_mode(cudnnPointwiseMode_t m) {
  return binary_mode(m) || m == CUDNN_POINTWISE_EXP || m == CUDNN_POINTWISE_LOG ||
         m == CUDNN_POINTWISE_IDENTITY || m == CUDNN_POINTWISE_GEN_INDEX;
}

cudnnStatus_t finalize_op(Desc& d) {
  GOp& op = d.op;
  auto tensor = [&](int a) -> const GTensor* {
    Desc* t = d.desc(a, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    return t == nullptr ? nullptr : &t->tensor;
  };
  switch (d.type) {
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR: {
      op.kind = OpKind::POINTWISE;
      Desc* pw = d.desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
      const GTensor *x = tensor(CUDNN_ATTR_OPERATION_POINTWISE_XDESC), *b = tensor(CUDNN_ATTR_OPERATION_POINTWISE_BDESC),
                    *t = tensor(CUDNN_ATTR_OPERATION_POINTWISE_TDESC), *y = tensor(CUDNN_ATTR_OPERATION_POINTWISE_YDESC);
      if (pw == nullptr || x == nullptr || y == nullptr)
        return graph_refuse(CUDNN_STATUS_BAD_PARAM, "pointwise op: a finalized pointwise descriptor, x and y are required");
      if (d.find(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1) || d.find(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2))
        return graph_refuse(CUDNN_STATUS_NOT_SUPPORTED, "pointwise op: alpha1 / alpha2 are not modelled");
      op.pw = pw->pw_mode;
      op.axis = pw->pw_axis;
      const bool needs_b = binary_mode(op.pw), needs_t = op.pw == CUDNN_POINTWISE_BINARY_SELECT;
      if (needs_b != (b != nullptr) || needs_t != (t != nullptr))
        return graph_refuse(CUDNN_STATUS_BAD_PARAM, "pointwise op: b (binary modes) / t (BINARY_SELECT) missing or extra");
      if (x->dims != y->dims || (b && !broadcastable(*b, *y)) || (t && !broadcastable(*t, *y)))
        return graph_refuse(CUDNN_STATUS_BAD_PARAM, "pointwise op: x must have y's dims, b and t each dim 1 or y's");
      if (op.pw == CUDNN_POINTWISE_GEN_INDEX && (op.axis < 0 || op.axis >= int64_t(y->dims.size())))
        return graph_refuse(CUDNN_STATUS_BAD_PARAM, "pointwise op: GEN_INDEX needs an axis inside the tensor");
      op.in = {*x};
      if (b) op.in.push_back(*b);
      if (t) op.in.push_back(*t);
      op.out = *y;
      return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR: {
      op.kind = OpKind::REDUCTION;
      Desc* rd = d.desc(CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
      const GTensor *x = tensor(CUDNN_ATTR_OPERATION_REDUCTION_XDESC), *y = tensor(CUDNN_ATTR_OPERATION_REDUCTION_YDESC);
      if (rd == nullptr || x == nullptr || y == nullptr)
        return graph_refuse(CUDNN_STATUS_BAD_PARAM, "reduction op: descriptor, x and y are required");
      if (!broadcastable(*y, *x))
        return graph_refuse(CUDNN_STATUS_BAD_PARAM, "reduction op: y's dims must each be 1 or x's");
      op.red = rd->red_op;
      op.in = {*x};
      op.out = *y;
      return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR: {
      op.kind = OpKind::MATMUL;
      const GTensor *a = tensor(CUDNN_ATTR_OPERATION_MATMUL_ADESC), *b = tensor(CUDNN_ATTR_OPERATION_MATMUL_BDESC),
                    *c = tensor(CUDNN_ATTR_OPERATION_MATMUL_CDESC);
      if (d.desc(CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_BACKEND_MATMUL_DESCRIPTOR) == nullptr || a == nullptr ||
          b == nullptr || c == nullptr)
        return graph_refuse(CUDNN_STATUS_BAD_PARAM, "matmul op: descriptor, a, b and c are required");
      if (d.find(CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC) || d.find(CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC) ||
          d.find(CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC))
        return graph_refuse(CUDNN_STATUS_NOT_SUPPORTED, "matmul op: M/N/K overrides are not modelled");
      const size_t n = c->dims.size();
      if (n < 2 || a->dims.size() != n || b->dims.size() != n || a->dims[n - 2] != c->dims[n - 2] ||
          b->dims[n - 1] != c->dims[n - 1] || a->dims[n - 1] != b->dims[n - 2])
        return graph_refuse(CUDNN_STATUS_BAD_PARAM, "matmul op: a [.., M, K], b [.., K, N], c [.., M, N] do not fit");
      for (size_t i = 0; i + 2 < n; i++)
        if ((a->dims[i] != 1 && a->dims[i] != c->dims[i]) || (b->dims[i] != 1 && b->dims[i] != c->dims[i]))
          return graph_refuse(CUDNN_STATUS_BAD_PARAM, "matmul op: batch dims of a and b must be 1 or c's");
      op.in = {*a, *b};
      op.out = *c;
      return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR: {
      op.kind = OpKind::RESHAPE;
      const GTensor *x = tensor(CUDNN_ATTR_OPERATION_RESHAPE_XDESC), *y = tensor(CUDNN_ATTR_OPERATION_RESHAPE_YDESC);
      if (x == nullptr || y == nullptr) return graph_refuse(CUDNN_STATUS_BAD_PARAM, "reshape op: x and y are required");
      if (x->count() != y->count())
        return graph_refuse(CUDNN_STATUS_BAD_PARAM, "reshape op: x and y must have as many elements");
      op.in = {*x};
      op.out = *y;
      return CUDNN_STATUS_SUCCESS;
    }
    default: return CUDNN_STATUS_BAD_PARAM;
  }
}

// Orders the ops so that each runs after the producers of its virtual inputs.
cudnnStatus_t finalize_graph(Desc& d) {
  const Attr* ops = d.find(CUDNN_ATTR_OPERATIONGRAPH_OPS);
  if (ops == nullptr || ops->count < 1) return graph_refuse(CUDNN_STATUS_BAD_PARAM, "operation graph: no ops");
  auto g = std::make_shared<GGraph>();
  std::vector<GOp> pending;
  std::map<int64_t, GTensor> produced, seen;
  for (int64_t i = 0; i < ops->count; i++) {
    Desc* od = static_cast<Desc*>(ops->at<cudnnBackendDescriptor_t>(i));
    if (od == nullptr || !od->finalized)
      return graph_refuse(CUDNN_STATUS_BAD_PARAM, "operation graph: an op is not finalized");
    pending.push_back(od->op);
    if (produced.count(od->op.out.uid))
      return graph_refuse(CUDNN_STATUS_BAD_PARAM, "operation graph: two ops write one tensor");
    produced[od->op.out.uid] = od->op.out;
  }
  for (const GOp& op : pending) {
    std::vector<GTensor> all = op.in;
    all.push_back(op.out);
    for (const GTensor& t : all) {
      auto [it, fresh] = seen.emplace(t.uid, t);
      if (!fresh && !it->second.same(t))
        return graph_refuse(CUDNN_STATUS_BAD_PARAM, "operation graph: one uid names two different tensors");
      if (t.is_virtual && !produced.count(t.uid))
        return graph_refuse(CUDNN_STATUS_BAD_PARAM, "operation graph: a virtual tensor nobody produces is read");
      if (!t.is_virtual) g->non_virtual[t.uid] = t;
    }
  }
  std::map<int64_t, bool> ready;
  while (!pending.empty()) {
    auto it = std::find_if(pending.begin(), pending.end(), [&](const GOp& op) {
      return std::all_of(op.in.begin(), op.in.end(),
                         [&](const GTensor& t) { return !produced.count(t.uid) || ready.count(t.uid); });
    });
    if (it == pending.end()) return graph_refuse(CUDNN_STATUS_BAD_PARAM, "operation graph: a cycle");
    ready[it->out.uid] = true;
    g->ops.push_back(*it);
    pending.erase(it);
  }
  g->workspace = 1024 * int64_t(g->ops.size());
  d.graph = g;
  return CUDNN_STATUS_SUCCESS;
}

// ---- execution ---------------------------------------------------------------------------------
struct Run {
  std::map<int64_t, void*> ptr;                    // non-virtual uid -> memory (by value: host scalar)
  std::map<int64_t, std::vector<double>> values;   // uid -> logical values (virtual, and read inputs)

  const std::vector<double>& read(const GTensor& t) {
    auto it = values.find(t.uid);
    if (it != values.end()) return it->second;
    std::vector<double> v(t.count());
    const void* base = ptr.at(t.uid);
    for (size_t i = 0; i < v.size(); i++) v[i] = t.by_value ? load_elem(base, t.type, 0) : load_elem(base, t.type, offset_of(t, i));
    return values[t.uid] = std::move(v);
  }
  void write(const GTensor& t, std::vector<double> v) {
    for (double& x : v) x = round_to(t.type, x);
    if (!t.is_virtual) {
      void* base = ptr.at(t.uid);
      for (size_t i = 0; i < v.size(); i++) store_elem(base, t.type, offset_of(t, i), v[i]);
    }
    values[t.uid] = std::move(v);
  }
};

double pointwise_value(cudnnPointwiseMode_t m, double x, double b) {
  switch (m) {
    case CUDNN_POINTWISE_ADD: return x + b;
    case CUDNN_POINTWISE_SUB: return x - b;
    case CUDNN_POINTWISE_MUL: return x * b;
    case CUDNN_POINTWISE_DIV: return x / b;
    case CUDNN_POINTWISE_MAX: return std::max(x, b);
    case CUDNN_POINTWISE_MIN: return std::min(x, b);
    case CUDNN_POINTWISE_EXP: return std::exp(x);
    case CUDNN_POINTWISE_LOG: return std::log(x);
    case CUDNN_POINTWISE_IDENTITY: return x;
    case CUDNN_POINTWISE_CMP_EQ: return x == b;
    case CUDNN_POINTWISE_CMP_NEQ: return x != b;
    case CUDNN_POINTWISE_CMP_GT: return x > b;
    case CUDNN_POINTWISE_CMP_GE: return x >= b;
    case CUDNN_POINTWISE_CMP_LT: return x < b;
    case CUDNN_POINTWISE_CMP_LE: return x <= b;
    default: return std::nan("");
  }
}

cudnnStatus_t run_op(Run& r, const GOp& op) {
  const GTensor& y = op.out;
  std::vector<double> out(y.count(), 0.0);
  switch (op.kind) {
    case OpKind::POINTWISE: {
      const std::vector<double>& x = r.read(op.in[0]);
      const std::vector<double>* b = op.in.size() > 1 ? &r.read(op.in[1]) : nullptr;
      const std::vector<double>* t = op.in.size() > 2 ? &r.read(op.in[2]) : nullptr;
      for (size_t i = 0; i < out.size(); i++) {
        const double bv = b ? (*b)[broadcast_index(y.dims, op.in[1].dims, i)] : 0.0;
        if (op.pw == CUDNN_POINTWISE_GEN_INDEX) {
          size_t lin = i;
          for (size_t dd = y.dims.size(); dd-- > size_t(op.axis) + 1;) lin /= size_t(y.dims[dd]);
          out[i] = double(lin % size_t(y.dims[size_t(op.axis)]));
        } else if (op.pw == CUDNN_POINTWISE_BINARY_SELECT) {
          out[i] = (*t)[broadcast_index(y.dims, op.in[2].dims, i)] != 0.0 ? x[i] : bv;
        } else {
          out[i] = pointwise_value(op.pw, x[i], bv);
        }
      }
      break;
    }
    case OpKind::REDUCTION: {
      const GTensor& xt = op.in[0];
      const std::vector<double>& x = r.read(xt);
      const bool mx = op.red == CUDNN_REDUCE_TENSOR_MAX;
      std::fill(out.begin(), out.end(), mx ? -std::numeric_limits<double>::infinity() : 0.0);
      for (size_t i = 0; i < x.size(); i++) {
        double& o = out[broadcast_index(xt.dims, y.dims, i)];
        o = mx ? std::max(o, x[i]) : o + x[i];
      }
      break;
    }
    case OpKind::MATMUL: {
      const GTensor &at = op.in[0], &bt = op.in[1];
      const std::vector<double>&a = r.read(at), &b = r.read(bt);
      const size_t n = y.dims.size(), M = size_t(y.dims[n - 2]), N = size_t(y.dims[n - 1]),
                   K = size_t(at.dims[n - 1]);
      const size_t batches = y.count() / (M * N);
      for (size_t bi = 0; bi < batches; bi++) {
        // the batch's first element in a and b (their batch dims broadcast)
        const size_t a0 = broadcast_index(y.dims, at.dims, bi * M * N) / (M * K) * (M * K);
        const size_t b0 = broadcast_index(y.dims, bt.dims, bi * M * N) / (K * N) * (K * N);
        for (size_t m = 0; m < M; m++)
          for (size_t nn = 0; nn < N; nn++) {
            double s = 0;
            for (size_t k = 0; k < K; k++) s += a[a0 + m * K + k] * b[b0 + k * N + nn];
            out[bi * M * N + m * N + nn] = s;
          }
      }
      break;
    }
    case OpKind::RESHAPE: {
      const GTensor& xt = op.in[0];
      const std::vector<double>& x = r.read(xt);
      std::map<size_t, size_t> at_offset;  // x's memory offset -> its logical index
      for (size_t i = 0; i < x.size(); i++) at_offset[offset_of(xt, i)] = i;
      for (size_t i = 0; i < out.size(); i++) {
        auto it = at_offset.find(offset_of(y, i));
        if (it == at_offset.end())
          return graph_refuse(CUDNN_STATUS_BAD_PARAM, "reshape: y reads a memory offset x does not cover");
        out[i] = x[it->second];
      }
      break;
    }
  }
  r.write(y, std::move(out));
  return CUDNN_STATUS_SUCCESS;
}

}  // namespace

extern "C" {

void cudnnGetLastErrorString(char* message, size_t max_size) {
  if (message != nullptr && max_size > 0) {
    std::strncpy(message, g_last_error.c_str(), max_size - 1);
    message[max_size - 1] = '\0';
  }
  g_last_error.clear();
}

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t* d) {
  if (d == nullptr) return graph_refuse(CUDNN_STATUS_BAD_PARAM, "cudnnBackendCreateDescriptor: null output");
  switch (type) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR: case CUDNN_BACKEND_POINTWISE_DESCRIPTOR:
    case CUDNN_BACKEND_REDUCTION_DESCRIPTOR: case CUDNN_BACKEND_MATMUL_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR: case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR: case CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR: case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR:
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR: case CUDNN_BACKEND_ENGINE_DESCRIPTOR:
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR:
      *d = new Desc(type);
      return CUDNN_STATUS_SUCCESS;
    default:
      return graph_refuse(CUDNN_STATUS_NOT_SUPPORTED,
                          "cudnnBackendCreateDescriptor: descriptor type " + std::to_string(int(type)) + " is not modelled");
  }
}

cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t d) {
  delete static_cast<Desc*>(d);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t count, const void* values) {
  Desc* desc = static_cast<Desc*>(d);
  if (desc == nullptr || count < 0 || (count > 0 && values == nullptr))
    return graph_refuse(CUDNN_STATUS_BAD_PARAM, "cudnnBackendSetAttribute: bad arguments");
  if (desc->finalized)
    return graph_refuse(CUDNN_STATUS_BAD_PARAM, "cudnnBackendSetAttribute: descriptor already finalized");
  const size_t es = element_size(type);
  if (es == 0)
    return graph_refuse(CUDNN_STATUS_NOT_SUPPORTED,
                        "cudnnBackendSetAttribute: attribute type " + std::to_string(int(type)) + " is not modelled");
  Attr a{type, count, std::vector<unsigned char>(size_t(count) * es)};
  if (count > 0) std::memcpy(a.bytes.data(), values, a.bytes.size());
  desc->attrs[int(name)] = std::move(a);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t d) {
  Desc* desc = static_cast<Desc*>(d);
  if (desc == nullptr || desc->finalized) return graph_refuse(CUDNN_STATUS_BAD_PARAM, "cudnnBackendFinalize: null or finalized");
  // Attributes this shim knows per descriptor type; any other is refused, not ignored.
  static const std::map<cudnnBackendDescriptorType_t, std::vector<int>> known = {
      {CUDNN_BACKEND_TENSOR_DESCRIPTOR,
       {CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_ATTR_TENSOR_UNIQUE_ID,
        CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_ATTR_TENSOR_IS_BY_VALUE}},
      {CUDNN_BACKEND_POINTWISE_DESCRIPTOR, {CUDNN_ATTR_POINTWISE_MODE, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_ATTR_POINTWISE_AXIS}},
      {CUDNN_BACKEND_REDUCTION_DESCRIPTOR, {CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_ATTR_REDUCTION_COMP_TYPE}},
      {CUDNN_BACKEND_MATMUL_DESCRIPTOR, {CUDNN_ATTR_MATMUL_COMP_TYPE}},
      {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR,
       {CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_ATTR_OPERATION_POINTWISE_BDESC,
        CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1,
        CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2}},
      {CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR,
       {CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_ATTR_OPERATION_REDUCTION_YDESC}},
      {CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR,
       {CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_ATTR_OPERATION_MATMUL_BDESC,
        CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC,
        CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC}},
      {CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, {CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_ATTR_OPERATION_RESHAPE_YDESC}},
      {CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, {CUDNN_ATTR_OPERATIONGRAPH_OPS, 800 /* HANDLE (deprecated) */}},
      {CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, {CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_ATTR_ENGINEHEUR_MODE}},
      {CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, {}},
      {CUDNN_BACKEND_ENGINE_DESCRIPTOR, {}},
      {CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, {CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, 400 /* HANDLE (deprecated) */}},
      {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR,
       {CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_ATTR_VARIANT_PACK_WORKSPACE}},
  };
  const std::vector<int>& ok = known.at(desc->type);
  for (const auto& [a, v] : desc->attrs)
    if (std::find(ok.begin(), ok.end(), a) == ok.end())
      return graph_refuse(CUDNN_STATUS_NOT_SUPPORTED, "cudnnBackendFinalize: attribute " + std::to_string(a) +
                                                          " of descriptor type " + std::to_string(int(desc->type)) +
                                                          " is not modelled");
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  switch (desc->type) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR: st = finalize_tensor(*desc); break;
    case CUDNN_BACKEND_POINTWISE_DESCRIPTOR: {
      cudnnDataType_t prec;
      if (!desc->get(CUDNN_ATTR_POINTWISE_MODE, desc->pw_mode) || !desc->get(CUDNN_ATTR_POINTWISE_MATH_PREC, prec))
        st = graph_refuse(CUDNN_STATUS_BAD_PARAM, "pointwise: mode and math precision are required");
      else if (!modelled_mode(desc->pw_mode))
        st = graph_refuse(CUDNN_STATUS_NOT_SUPPORTED, "pointwise: mode " + std::to_string(int(desc->pw_mode)) + " is not modelled");
      else
        desc->get(CUDNN_ATTR_POINTWISE_AXIS, desc->pw_axis);
      break;
    }
    case CUDNN_BACKEND_REDUCTION_DESCRIPTOR: {
      cudnnDataType_t prec;
      if (!desc->get(CUDNN_ATTR_REDUCTION_OPERATOR, desc->red_op) || !desc->get(CUDNN_ATTR_REDUCTION_COMP_TYPE, prec))
        st = graph_refuse(CUDNN_STATUS_BAD_PARAM, "reduction: operator and comp type are required");
      else if ((desc->red_op != CUDNN_REDUCE_TENSOR_ADD && desc->red_op != CUDNN_REDUCE_TENSOR_MAX) || prec != CUDNN_DATA_FLOAT)
        st = graph_refuse(CUDNN_STATUS_NOT_SUPPORTED, "reduction: only ADD and MAX in FLOAT are modelled");
      break;
    }
    case CUDNN_BACKEND_MATMUL_DESCRIPTOR: {
      cudnnDataType_t prec;
      if (!desc->get(CUDNN_ATTR_MATMUL_COMP_TYPE, prec))
        st = graph_refuse(CUDNN_STATUS_BAD_PARAM, "matmul: comp type is required");
      else if (prec != CUDNN_DATA_FLOAT)
        st = graph_refuse(CUDNN_STATUS_NOT_SUPPORTED, "matmul: only FLOAT comp type is modelled");
      break;
    }
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR: case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR: case CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR:
      st = finalize_op(*desc);
      break;
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR: st = finalize_graph(*desc); break;
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR: {
      Desc* g = desc->desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
      cudnnBackendHeurMode_t mode;
      if (g == nullptr || !desc->get(CUDNN_ATTR_ENGINEHEUR_MODE, mode))
        st = graph_refuse(CUDNN_STATUS_BAD_PARAM, "engine heuristics: a finalized graph and a mode are required");
      else if (const char* e = std::getenv("BATON_CUDNN_EMU_NO_ENGINES"); e != nullptr && std::string(e) == "1")
        st = graph_refuse(CUDNN_STATUS_NOT_SUPPORTED, "engine heuristics: no engine supports the graph "
                                                      "(BATON_CUDNN_EMU_NO_ENGINES=1)");
      else
        desc->graph = g->graph;
      break;
    }
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR: case CUDNN_BACKEND_ENGINE_DESCRIPTOR:
      if (!desc->graph) st = graph_refuse(CUDNN_STATUS_BAD_PARAM, "engine / engine config: only filled by the heuristics here");
      break;
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: {
      Desc* cfg = desc->desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
      if (cfg == nullptr) {
        st = graph_refuse(CUDNN_STATUS_BAD_PARAM, "execution plan: a finalized engine config is required");
      } else {
        desc->graph = cfg->graph;
        desc->engine = cfg->engine;
      }
      break;
    }
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR: {
      const Attr* u = desc->find(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS);
      const Attr* p = desc->find(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
      if (u == nullptr || p == nullptr || u->count != p->count) {
        st = graph_refuse(CUDNN_STATUS_BAD_PARAM, "variant pack: as many uids as data pointers are required");
      } else {
        for (int64_t i = 0; i < u->count; i++) {
          desc->uids.push_back(u->at<int64_t>(i));
          desc->ptrs.push_back(p->at<void*>(i));
        }
        desc->get(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, desc->workspace);
      }
      break;
    }
    default: st = graph_refuse(CUDNN_STATUS_NOT_SUPPORTED, "cudnnBackendFinalize: descriptor type not modelled");
  }
  if (st == CUDNN_STATUS_SUCCESS) desc->finalized = true;
  return st;
}

cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const d, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t requested, int64_t* count,
                                       void* values) {
  const Desc* desc = static_cast<const Desc*>(d);
  if (desc == nullptr || count == nullptr || !desc->finalized)
    return graph_refuse(CUDNN_STATUS_BAD_PARAM, "cudnnBackendGetAttribute: null or not finalized");
  auto put_i64 = [&](int64_t v) {
    if (type != CUDNN_TYPE_INT64 || requested < 1 || values == nullptr)
      return graph_refuse(CUDNN_STATUS_BAD_PARAM, "cudnnBackendGetAttribute: an INT64 is read here");
    *count = 1;
    *static_cast<int64_t*>(values) = v;
    return CUDNN_STATUS_SUCCESS;
  };
  if (desc->type == CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR && name == CUDNN_ATTR_ENGINEHEUR_RESULTS) {
    if (type != CUDNN_TYPE_BACKEND_DESCRIPTOR) return graph_refuse(CUDNN_STATUS_BAD_PARAM, "heuristics results are descriptors");
    *count = values == nullptr ? kEngines : std::min(requested, kEngines);
    for (int64_t i = 0; values != nullptr && i < *count; i++) {
      Desc* cfg = static_cast<Desc*>(static_cast<cudnnBackendDescriptor_t*>(values)[i]);
      if (cfg == nullptr || cfg->type != CUDNN_BACKEND_ENGINECFG_DESCRIPTOR)
        return graph_refuse(CUDNN_STATUS_BAD_PARAM, "heuristics results: pass created ENGINECFG descriptors");
      cfg->graph = desc->graph;
      cfg->engine = i;
      cfg->finalized = true;
    }
    return CUDNN_STATUS_SUCCESS;
  }
  if (desc->type == CUDNN_BACKEND_ENGINECFG_DESCRIPTOR && name == CUDNN_ATTR_ENGINECFG_ENGINE) {
    Desc* e = values == nullptr ? nullptr : static_cast<Desc*>(*static_cast<cudnnBackendDescriptor_t*>(values));
    if (type != CUDNN_TYPE_BACKEND_DESCRIPTOR || requested < 1 || e == nullptr || e->type != CUDNN_BACKEND_ENGINE_DESCRIPTOR)
      return graph_refuse(CUDNN_STATUS_BAD_PARAM, "engine config's engine: pass one created ENGINE descriptor");
    e->graph = desc->graph;
    e->engine = desc->engine;
    e->finalized = true;
    *count = 1;
    return CUDNN_STATUS_SUCCESS;
  }
  if (desc->type == CUDNN_BACKEND_ENGINE_DESCRIPTOR && name == CUDNN_ATTR_ENGINE_GLOBAL_INDEX) return put_i64(desc->engine);
  if (desc->type == CUDNN_BACKEND_ENGINE_DESCRIPTOR &&
      (name == CUDNN_ATTR_ENGINE_NUMERICAL_NOTE || name == CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE)) {
    const bool numerical = name == CUDNN_ATTR_ENGINE_NUMERICAL_NOTE;
    if (type != (numerical ? CUDNN_TYPE_NUMERICAL_NOTE : CUDNN_TYPE_BEHAVIOR_NOTE))
      return graph_refuse(CUDNN_STATUS_BAD_PARAM, "engine notes: wrong attribute type");
    const bool nondet = desc->engine == kNondeterministicEngine;
    *count = numerical ? (nondet ? 2 : 1) : 1;
    if (values != nullptr && requested >= *count) {
      if (numerical) {
        auto* n = static_cast<cudnnBackendNumericalNote_t*>(values);
        n[0] = CUDNN_NUMERICAL_NOTE_TENSOR_CORE;
        if (nondet) n[1] = CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
      } else {
        static_cast<cudnnBackendBehaviorNote_t*>(values)[0] = CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION;
      }
    }
    return CUDNN_STATUS_SUCCESS;
  }
  if (desc->type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR && name == CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE)
    return put_i64(desc->graph->workspace);
  return graph_refuse(CUDNN_STATUS_NOT_SUPPORTED, "cudnnBackendGetAttribute: attribute " + std::to_string(int(name)) +
                                                      " of descriptor type " + std::to_string(int(desc->type)) +
                                                      " is not modelled");
}

cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t pack) {
  const Desc* p = static_cast<const Desc*>(plan);
  const Desc* v = static_cast<const Desc*>(pack);
  if (handle == nullptr || p == nullptr || v == nullptr || !p->finalized || !v->finalized ||
      p->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR || v->type != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)
    return graph_refuse(CUDNN_STATUS_BAD_PARAM, "cudnnBackendExecute: a handle, a finalized plan and variant pack");
  if (p->engine == kNondeterministicEngine)
    return graph_refuse(CUDNN_STATUS_BAD_PARAM, "cudnnBackendExecute: engine 0 is NONDETERMINISTIC and baton promises "
                                                "bitwise determinism: a caller must skip it");
  const GGraph& g = *p->graph;
  if (g.workspace > 0 && v->workspace == nullptr)
    return graph_refuse(CUDNN_STATUS_BAD_PARAM, "cudnnBackendExecute: the plan needs a workspace, none given");
  Run r;
  for (size_t i = 0; i < v->uids.size(); i++) r.ptr[v->uids[i]] = v->ptrs[i];
  for (const auto& [uid, t] : g.non_virtual)
    if (r.ptr.count(uid) == 0 || r.ptr[uid] == nullptr)
      return graph_refuse(CUDNN_STATUS_BAD_PARAM, "cudnnBackendExecute: tensor uid " + std::to_string(uid) +
                                                      " has no pointer in the variant pack");
  if (g.workspace > 0) std::memset(v->workspace, 0xFF, size_t(g.workspace));
  for (const GOp& op : g.ops)
    if (cudnnStatus_t st = run_op(r, op); st != CUDNN_STATUS_SUCCESS) return st;
  return CUDNN_STATUS_SUCCESS;
}

}  // extern "C"
