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
