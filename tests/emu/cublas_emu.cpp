// cublas_emu: the cuBLAS and cuBLASLt entry points baton calls (kernels/gemm.cu, kernels/gemm_lt.cu,
// src/backend/cuda/cuda_backend.cpp), on host memory, for programs built against the emulated
// kernels (tests/emu/emulated_kernels.cmake) instead of libcublas/libcublasLt. Declarations are
// the real headers' (cublas_v2.h, cublasLt.h, CUDA 13.1); the semantics implemented are those the
// headers' comments document, independently of how baton's wrappers use them, so that the
// wrappers' row-major -> column-major mapping, leading dimensions and epilogue use are tested.
//
// Arithmetic (both APIs): column-major, op(A) m x k, op(B) k x n, C and D m x n, element (i, j) of
// X at X[i + j * ld]. The k products are exact in double (bf16 and fp32 inputs) and ACCUMULATED IN
// DOUBLE, then alpha * sum + beta * C is formed in double and rounded ONCE to D's type (fp32, or
// bf16 round-to-nearest-even). The real library accumulates in fp32 in an unspecified order, so the
// shim is more accurate than the device: tolerances that cover the device cover it. beta == 0: C is
// not read (cuBLAS: "C does not have to be a valid input" - emulated memory starts as NaN, so a
// wrapper relying on reading C with beta = 0 shows up). C may alias D (results go through a buffer).
// Deterministic; single-threaded (4 independent partial sums per dot product).
//
// cuBLAS: cublasCreate/Destroy/SetStream/SetMathMode/SetAtomicsMode/SetWorkspace (recorded, not
// used: every call is synchronous), cublasGemmEx and cublasGemmStridedBatchedEx with A, B, C all
// CUDA_R_32F and computeType CUBLAS_COMPUTE_32F or CUBLAS_COMPUTE_32F_PEDANTIC, alpha/beta host
// floats. Refused with CUBLAS_STATUS_NOT_SUPPORTED: other types, other compute types (TF32, 16F,
// 16BF fast modes) and CUBLAS_COMPUTE_32F under CUBLAS_TF32_TENSOR_OP_MATH (the device would use
// TF32, which the shim does not emulate). CUBLAS_STATUS_INVALID_VALUE as documented: m, n, k or
// batchCount < 0, lda < max(1, rows of stored A), ldb likewise, ldc < max(1, m).
//
// cuBLASLt: handle, matmul descriptor (COMPUTE_TYPE, SCALE_TYPE, POINTER_MODE, TRANSA, TRANSB,
// TRANSC, EPILOGUE, BIAS_POINTER, BIAS_DATA_TYPE, EPILOGUE_AUX_POINTER, EPILOGUE_AUX_LD,
// EPILOGUE_AUX_DATA_TYPE settable, sizes checked -> INVALID_VALUE; other attributes
// NOT_SUPPORTED), matrix layouts (ROWS/COLS/LD/TYPE from create; ORDER = COL and BATCH_COUNT = 1
// accepted through SetAttribute, anything else NOT_SUPPORTED), preferences (MAX_WORKSPACE_BYTES,
// MIN_ALIGNMENT_{A,B,C,D}_BYTES, default 256 as documented), cublasLtMatmulAlgoGetHeuristic (one
// result when the configuration is supported, else CUBLAS_STATUS_NOT_SUPPORTED; the algorithm
// records the alignments it was selected for: the preference's for A-D, the descriptor's bias/aux
// pointers' for them) and cublasLtMatmul (validates again; INVALID_VALUE when a pointer is less
// aligned than the algorithm was selected for, as an algorithm that assumes 256-byte alignment
// cannot run on a 2-byte-aligned buffer).
//   Supported: compute CUBLAS_COMPUTE_32F(_PEDANTIC), scale CUDA_R_32F, host pointer mode;
//   A, B both CUDA_R_16BF or both CUDA_R_32F; C = D type, CUDA_R_16BF or CUDA_R_32F (fp32 A/B only
//   with fp32 C/D); Cdesc equal to Ddesc in type, shape and ld (TRANSC = N); epilogues
//     DEFAULT        D = alpha op(A) op(B) + beta C
//     BIAS           D = alpha op(A) op(B) + beta C + bias[i]       bias: one per ROW of D (length m)
//     GELU, GELU_BIAS  D = gelu(x), x = alpha AB + beta C (+ bias[i])
//     GELU_AUX, GELU_AUX_BIAS  the same, and aux[i + j * ldaux] = x stored in the aux type
//     DGELU          D = gelu'(aux[i + j * ldaux]) * (alpha AB + beta C)
//   gelu is the tanh form 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))) in double (cublasLt.h does
//   not say which form; PyTorch's fallback and llm.c assume tanh). Bias and aux types: D's type
//   (BIAS_DATA_TYPE / EPILOGUE_AUX_DATA_TYPE default -1 = D's type; another value NOT_SUPPORTED).
//   EPILOGUE_AUX_LD must be divisible by 8 and >= rows of D (cublasLt.h), aux and bias pointers
//   non-null when their epilogue needs them: else NOT_SUPPORTED from the heuristic and
//   INVALID_VALUE from cublasLtMatmul.
//   Refused (NOT_SUPPORTED): RELU*, DRELU*, *BGRAD*, BGRADA/B, batched layouts, row-major or
//   other orders, fp16/fp8/int types, device pointer modes, TF32/16F compute.
// Fault injection (tests of the callers' fallback paths): BATON_CUBLASLT_EMU_REFUSE_EPILOGUES=
//   heuristic  cublasLtMatmulAlgoGetHeuristic answers CUBLAS_STATUS_NOT_SUPPORTED for every
//              epilogue other than DEFAULT (as for a configuration no kernel of the library covers);
//   matmul     the heuristic offers an algorithm but cublasLtMatmul refuses it with
//              CUBLAS_STATUS_NOT_SUPPORTED (a refusal at launch);
//   unset/empty  no refusal. Anything else aborts (a typo must not silently test nothing).
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

struct cublasContext {
  uint32_t magic = 0xC0B1A5u;
  cudaStream_t stream = nullptr;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
  cublasAtomicsMode_t atomics = CUBLAS_ATOMICS_NOT_ALLOWED;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};
struct cublasLtContext {
  uint32_t magic = 0x17C0u;
};

namespace {

// ---- elements ------------------------------------------------------------------------------
float bf16_to_f(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t f_to_bf16(float f) {  // round to nearest even; NaN stays NaN
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
size_t type_bytes(cudaDataType_t t) { return t == CUDA_R_16BF ? 2 : 4; }
double load(const void* p, cudaDataType_t t, size_t i) {
  if (t == CUDA_R_16BF) return bf16_to_f(static_cast<const uint16_t*>(p)[i]);
  return static_cast<const float*>(p)[i];
}
void store(void* p, cudaDataType_t t, size_t i, double v) {
  if (t == CUDA_R_16BF)
    static_cast<uint16_t*>(p)[i] = f_to_bf16(float(v));  // double -> float exact enough: see below
  else
    static_cast<float*>(p)[i] = float(v);
}
// Note on store(): double -> float -> bf16 is a double rounding; it differs from a direct
// double -> bf16 rounding only when the double lies within 2^-24 relative of a bf16 tie, which is
// below every tolerance a test can state for a bf16 result (2^-9 relative).

uint32_t alignment_of(const void* p) {
  const uintptr_t v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && v % a != 0) a >>= 1;
  return a;
}

double gelu_tanh(double x) {
  const double k = 0.7978845608028654;  // sqrt(2/pi)
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}
double gelu_tanh_grad(double x) {
  const double k = 0.7978845608028654;
  const double th = std::tanh(k * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * k * (1.0 + 3.0 * 0.044715 * x * x);
}

// ---- the product ---------------------------------------------------------------------------
// prod[i + j * m] = sum_p op(A)(i, p) op(B)(p, j) in double. A stored column-major with lda (m x k
// when op N, k x m when T); B likewise (k x n / n x k).
std::vector<double> product(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void* A,
                            cudaDataType_t at, int64_t lda, const void* B, cudaDataType_t bt,
                            int64_t ldb) {
  // Rows of op(A) and columns of op(B) as contiguous double vectors of length k.
  std::vector<double> a(size_t(m * k)), b(size_t(n * k)), out(size_t(m * n));
  for (int64_t i = 0; i < m; i++)
    for (int64_t p = 0; p < k; p++)
      a[size_t(i * k + p)] = load(A, at, size_t(ta ? p + i * lda : i + p * lda));
  for (int64_t j = 0; j < n; j++)
    for (int64_t p = 0; p < k; p++)
      b[size_t(j * k + p)] = load(B, bt, size_t(tb ? j + p * ldb : p + j * ldb));
  for (int64_t j = 0; j < n; j++) {
    const double* bj = b.data() + j * k;
    for (int64_t i = 0; i < m; i++) {
      const double* ai = a.data() + i * k;
      double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      int64_t p = 0;
      for (; p + 4 <= k; p += 4) {
        s0 += ai[p] * bj[p];
        s1 += ai[p + 1] * bj[p + 1];
        s2 += ai[p + 2] * bj[p + 2];
        s3 += ai[p + 3] * bj[p + 3];
      }
      for (; p < k; p++) s0 += ai[p] * bj[p];
      out[size_t(i + j * m)] = (s0 + s1) + (s2 + s3);
    }
  }
  return out;
}

enum class Refuse { kNone, kHeuristic, kMatmul };
Refuse refuse_from_env() {
  static const Refuse r = [] {
    const char* e = std::getenv("BATON_CUBLASLT_EMU_REFUSE_EPILOGUES");
    const std::string v = e ? e : "";
    if (v.empty()) return Refuse::kNone;
    if (v == "heuristic") return Refuse::kHeuristic;
    if (v == "matmul") return Refuse::kMatmul;
    std::fprintf(stderr, "cublas_emu: BATON_CUBLASLT_EMU_REFUSE_EPILOGUES must be heuristic or matmul, not %s\n",
                 v.c_str());
    std::abort();
  }();
  return r;
}

bool valid_op(int op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T; }

// ---- cuBLAS GEMM (fp32) ----------------------------------------------------------------------
cublasStatus_t gemm_ex_check(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                             int n, int k, const void* alpha, cudaDataType at, int lda,
                             cudaDataType bt, int ldb, const void* beta, cudaDataType ct, int ldc,
                             cublasComputeType_t compute) {
  if (h == nullptr || h->magic != 0xC0B1A5u) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!valid_op(ta) || !valid_op(tb)) return CUBLAS_STATUS_INVALID_VALUE;
  if (m < 0 || n < 0 || k < 0) return CUBLAS_STATUS_INVALID_VALUE;
  const int arows = ta == CUBLAS_OP_N ? m : k, brows = tb == CUBLAS_OP_N ? k : n;
  if (lda < std::max(1, arows) || ldb < std::max(1, brows) || ldc < std::max(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (alpha == nullptr || beta == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (at != CUDA_R_32F || bt != CUDA_R_32F || ct != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (compute == CUBLAS_COMPUTE_32F_PEDANTIC) return CUBLAS_STATUS_SUCCESS;
  if (compute == CUBLAS_COMPUTE_32F) {
    // Under CUBLAS_TF32_TENSOR_OP_MATH, COMPUTE_32F may use TF32: not emulated.
    if ((int(h->math) & 0xf) == CUBLAS_TF32_TENSOR_OP_MATH) return CUBLAS_STATUS_NOT_SUPPORTED;
    return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_NOT_SUPPORTED;
}

void gemm_f32(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
              const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  if (m == 0 || n == 0) return;
  std::vector<double> prod;
  if (k > 0 && alpha != 0.0f)
    prod = product(ta == CUBLAS_OP_T, tb == CUBLAS_OP_T, m, n, k, A, CUDA_R_32F, lda, B,
                   CUDA_R_32F, ldb);
  for (int64_t j = 0; j < n; j++)
    for (int64_t i = 0; i < m; i++) {
      double v = prod.empty() ? 0.0 : double(alpha) * prod[size_t(i + j * m)];
      float* c = C + i + j * int64_t(ldc);
      if (beta != 0.0f) v += double(beta) * double(*c);
      *c = float(v);
    }
}

// ---- cuBLASLt objects ------------------------------------------------------------------------
constexpr uint64_t kDescMagic = 0x4C54444553430001ull, kLayoutMagic = 0x4C544C41594F0001ull,
                   kPrefMagic = 0x4C54505245460001ull, kAlgoMagic = 0x4C54414C474F0001ull;

struct Desc {
  uint64_t magic = kDescMagic;
  int32_t compute, scale, pointer_mode = CUBLASLT_POINTER_MODE_HOST;
  int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N, transc = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  int32_t bias_type = -1;
  void* aux = nullptr;
  int64_t aux_ld = 0;
  int32_t aux_type = -1;
};
struct Layout {
  uint64_t magic = kLayoutMagic;
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
};
struct Pref {
  uint64_t magic = kPrefMagic;
  uint64_t max_workspace = 0;
  uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D (cublasLt.h: default 256)
};
// What cublasLtMatmulAlgo_t carries: the alignments the algorithm was selected for.
struct Algo {
  uint64_t magic;
  uint32_t align[6];  // A, B, C, D, bias, aux
};
static_assert(sizeof(Algo) <= sizeof(cublasLtMatmulAlgo_t));

Desc* desc_of(cublasLtMatmulDesc_t d) {
  auto* p = reinterpret_cast<Desc*>(d);
  return p != nullptr && p->magic == kDescMagic ? p : nullptr;
}
Layout* layout_of(cublasLtMatrixLayout_t l) {
  auto* p = reinterpret_cast<Layout*>(l);
  return p != nullptr && p->magic == kLayoutMagic ? p : nullptr;
}
Pref* pref_of(cublasLtMatmulPreference_t q) {
  auto* p = reinterpret_cast<Pref*>(q);
  return p != nullptr && p->magic == kPrefMagic ? p : nullptr;
}

template <class T>
cublasStatus_t set_value(T& dst, const void* buf, size_t bytes) {
  if (buf == nullptr || bytes != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&dst, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

bool epilogue_has_bias(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS ||
         e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool epilogue_gelu(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_AUX ||
         e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool epilogue_aux(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
         e == CUBLASLT_EPILOGUE_DGELU;
}
bool epilogue_supported(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_DEFAULT || e == CUBLASLT_EPILOGUE_BIAS || epilogue_gelu(e) ||
         e == CUBLASLT_EPILOGUE_DGELU;
}

// The configuration check shared by the heuristic and cublasLtMatmul. `unsupported` is what a
// configuration the shim (or the documentation) does not allow returns.
cublasStatus_t check_config(const Desc& d, const Layout& a, const Layout& b, const Layout& c,
                            const Layout& dl, cublasStatus_t unsupported) {
  if (d.compute != CUBLAS_COMPUTE_32F && d.compute != CUBLAS_COMPUTE_32F_PEDANTIC) return unsupported;
  if (d.scale != CUDA_R_32F || d.pointer_mode != CUBLASLT_POINTER_MODE_HOST) return unsupported;
  if (!valid_op(d.transa) || !valid_op(d.transb) || d.transc != CUBLAS_OP_N) return unsupported;
  if (!epilogue_supported(d.epilogue)) return unsupported;
  // Types.
  if (a.type != b.type || (a.type != CUDA_R_16BF && a.type != CUDA_R_32F)) return unsupported;
  if (c.type != dl.type || (dl.type != CUDA_R_16BF && dl.type != CUDA_R_32F)) return unsupported;
  if (a.type == CUDA_R_32F && dl.type != CUDA_R_32F) return unsupported;
  // Shapes: D is m x n; op(A) m x k; op(B) k x n; C as D.
  const uint64_t m = dl.rows, n = dl.cols;
  const uint64_t am = d.transa == CUBLAS_OP_N ? a.rows : a.cols;
  const uint64_t ak = d.transa == CUBLAS_OP_N ? a.cols : a.rows;
  const uint64_t bk = d.transb == CUBLAS_OP_N ? b.rows : b.cols;
  const uint64_t bn = d.transb == CUBLAS_OP_N ? b.cols : b.rows;
  if (am != m || bn != n || ak != bk) return CUBLAS_STATUS_INVALID_VALUE;
  if (c.rows != m || c.cols != n) return CUBLAS_STATUS_INVALID_VALUE;
  if (c.ld != dl.ld) return unsupported;  // the shim supports C with D's layout only
  for (const Layout* l : {&a, &b, &c, &dl})
    if (l->ld < int64_t(std::max<uint64_t>(1, l->rows))) return CUBLAS_STATUS_INVALID_VALUE;
  // Epilogue inputs (types: D's, cublasLt.h BIAS_DATA_TYPE / EPILOGUE_AUX_DATA_TYPE).
  if (epilogue_has_bias(d.epilogue)) {
    if (d.bias_type != -1 && d.bias_type != int32_t(dl.type)) return unsupported;
    if (d.bias == nullptr) return unsupported;
  }
  if (epilogue_aux(d.epilogue)) {
    if (d.aux_type != -1 && d.aux_type != int32_t(dl.type)) return unsupported;
    if (d.aux == nullptr) return unsupported;
    // cublasLt.h EPILOGUE_AUX_LD: "Must be divisible by 8 and be no less than the number of rows
    // in the output matrix."
    if (d.aux_ld % 8 != 0 || d.aux_ld < int64_t(m)) return unsupported;
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

extern "C" {

// ---- status strings ------------------------------------------------------------------------
const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "<unknown>";
}
const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported (cublas_emu)";
    case CUBLAS_STATUS_LICENSE_ERROR: return "error detected trying to check the license";
  }
  return "unknown error";
}
const char* cublasLtGetStatusName(cublasStatus_t status) { return cublasGetStatusName(status); }
const char* cublasLtGetStatusString(cublasStatus_t status) { return cublasGetStatusString(status); }

// ---- cuBLAS handle ---------------------------------------------------------------------------
cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new cublasContext{};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  if (handle == nullptr || handle->magic != 0xC0B1A5u) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->magic = 0;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId) {
  if (handle == nullptr || handle->magic != 0xC0B1A5u) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = streamId;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* streamId) {
  if (handle == nullptr || handle->magic != 0xC0B1A5u) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (streamId == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *streamId = handle->stream;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (handle == nullptr || handle->magic != 0xC0B1A5u) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t mode) {
  if (handle == nullptr || handle->magic != 0xC0B1A5u) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode != CUBLAS_ATOMICS_NOT_ALLOWED && mode != CUBLAS_ATOMICS_ALLOWED)
    return CUBLAS_STATUS_INVALID_VALUE;
  handle->atomics = mode;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, size_t bytes) {
  if (handle == nullptr || handle->magic != 0xC0B1A5u) return CUBLAS_STATUS_NOT_INITIALIZED;
  // cuBLAS: the workspace pointer must be aligned to at least 256 bytes.
  if (workspace != nullptr && alignment_of(workspace) < 256) return CUBLAS_STATUS_INVALID_VALUE;
  handle->workspace = workspace;
  handle->workspace_bytes = bytes;
  return CUBLAS_STATUS_SUCCESS;
}

// ---- cuBLAS GEMMs ----------------------------------------------------------------------------
cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C,
                            cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t) {
  const cublasStatus_t st = gemm_ex_check(handle, transa, transb, m, n, k, alpha, Atype, lda, Btype,
                                          ldb, beta, Ctype, ldc, computeType);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  gemm_f32(transa, transb, m, n, k, *static_cast<const float*>(alpha),
           static_cast<const float*>(A), lda, static_cast<const float*>(B), ldb,
           *static_cast<const float*>(beta), static_cast<float*>(C), ldc);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                          cublasOperation_t transb, int m, int n, int k,
                                          const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long int strideA, const void* B,
                                          cudaDataType Btype, int ldb, long long int strideB,
                                          const void* beta, void* C, cudaDataType Ctype, int ldc,
                                          long long int strideC, int batchCount,
                                          cublasComputeType_t computeType, cublasGemmAlgo_t) {
  const cublasStatus_t st = gemm_ex_check(handle, transa, transb, m, n, k, alpha, Atype, lda, Btype,
                                          ldb, beta, Ctype, ldc, computeType);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  if (batchCount < 0) return CUBLAS_STATUS_INVALID_VALUE;
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  for (int b = 0; b < batchCount; b++)
    gemm_f32(transa, transb, m, n, k, al, static_cast<const float*>(A) + b * strideA, lda,
             static_cast<const float*>(B) + b * strideB, ldb, be,
             static_cast<float*>(C) + b * strideC, ldc);
  return CUBLAS_STATUS_SUCCESS;
}

// ---- cuBLASLt objects ------------------------------------------------------------------------
cublasStatus_t cublasLtCreate(cublasLtHandle_t* lightHandle) {
  if (lightHandle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *lightHandle = new cublasLtContext{};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle) {
  if (lightHandle == nullptr || lightHandle->magic != 0x17C0u) return CUBLAS_STATUS_NOT_INITIALIZED;
  lightHandle->magic = 0;
  delete lightHandle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc,
                                        cublasComputeType_t computeType, cudaDataType_t scaleType) {
  if (matmulDesc == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  auto* d = new Desc{};
  d->compute = computeType;
  d->scale = scaleType;
  *matmulDesc = reinterpret_cast<cublasLtMatmulDesc_t>(d);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  Desc* d = desc_of(matmulDesc);
  if (d == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  d->magic = 0;
  delete d;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              size_t sizeInBytes) {
  Desc* d = desc_of(matmulDesc);
  if (d == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return set_value(d->compute, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return set_value(d->scale, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: return set_value(d->pointer_mode, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_TRANSA: return set_value(d->transa, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_TRANSB: return set_value(d->transb, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_TRANSC: return set_value(d->transc, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return set_value(d->epilogue, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return set_value(d->bias, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return set_value(d->bias_type, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return set_value(d->aux, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return set_value(d->aux_ld, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: return set_value(d->aux_type, buf, sizeInBytes);
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  if (matLayout == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  auto* l = new Layout{};
  l->type = type;
  l->rows = rows;
  l->cols = cols;
  l->ld = ld;
  *matLayout = reinterpret_cast<cublasLtMatrixLayout_t>(l);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  Layout* l = layout_of(matLayout);
  if (l == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  l->magic = 0;
  delete l;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout,
                                                cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t sizeInBytes) {
  Layout* l = layout_of(matLayout);
  if (l == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_ROWS: return set_value(l->rows, buf, sizeInBytes);
    case CUBLASLT_MATRIX_LAYOUT_COLS: return set_value(l->cols, buf, sizeInBytes);
    case CUBLASLT_MATRIX_LAYOUT_LD: return set_value(l->ld, buf, sizeInBytes);
    case CUBLASLT_MATRIX_LAYOUT_ORDER: {
      int32_t order = 0;
      const cublasStatus_t st = set_value(order, buf, sizeInBytes);
      if (st != CUBLAS_STATUS_SUCCESS) return st;
      return order == CUBLASLT_ORDER_COL ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
    }
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: {
      int32_t count = 0;
      const cublasStatus_t st = set_value(count, buf, sizeInBytes);
      if (st != CUBLAS_STATUS_SUCCESS) return st;
      return count == 1 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
    }
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (pref == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *pref = reinterpret_cast<cublasLtMatmulPreference_t>(new Pref{});
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  Pref* p = pref_of(pref);
  if (p == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  p->magic = 0;
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t sizeInBytes) {
  Pref* p = pref_of(pref);
  if (p == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return set_value(p->max_workspace, buf, sizeInBytes);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return set_value(p->align[0], buf, sizeInBytes);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return set_value(p->align[1], buf, sizeInBytes);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return set_value(p->align[2], buf, sizeInBytes);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return set_value(p->align[3], buf, sizeInBytes);
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle,
                                              cublasLtMatmulDesc_t operationDesc,
                                              cublasLtMatrixLayout_t Adesc,
                                              cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc,
                                              cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference,
                                              int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int* returnAlgoCount) {
  if (lightHandle == nullptr || lightHandle->magic != 0x17C0u) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (requestedAlgoCount <= 0 || heuristicResultsArray == nullptr || returnAlgoCount == nullptr)
    return CUBLAS_STATUS_INVALID_VALUE;
  Desc* d = desc_of(operationDesc);
  Layout *a = layout_of(Adesc), *b = layout_of(Bdesc), *c = layout_of(Cdesc), *dl = layout_of(Ddesc);
  Pref* p = pref_of(preference);
  if (d == nullptr || a == nullptr || b == nullptr || c == nullptr || dl == nullptr || p == nullptr)
    return CUBLAS_STATUS_INVALID_VALUE;
  *returnAlgoCount = 0;
  const cublasStatus_t st = check_config(*d, *a, *b, *c, *dl, CUBLAS_STATUS_NOT_SUPPORTED);
  if (st != CUBLAS_STATUS_SUCCESS) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (refuse_from_env() == Refuse::kHeuristic && d->epilogue != CUBLASLT_EPILOGUE_DEFAULT)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  // The preference's alignments must be possible for the element types.
  const size_t ab = type_bytes(a->type), cb = type_bytes(dl->type);
  if (p->align[0] < ab || p->align[1] < ab || p->align[2] < cb || p->align[3] < cb)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  cublasLtMatmulHeuristicResult_t& r = heuristicResultsArray[0];
  std::memset(&r, 0, sizeof(r));
  Algo algo{kAlgoMagic, {p->align[0], p->align[1], p->align[2], p->align[3],
                         d->bias ? alignment_of(d->bias) : 0u, d->aux ? alignment_of(d->aux) : 0u}};
  std::memcpy(&r.algo, &algo, sizeof(algo));
  r.workspaceSize = 0;
  r.state = CUBLAS_STATUS_SUCCESS;
  r.wavesCount = 1.0f;
  *returnAlgoCount = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc,
                              const void* alpha, const void* A, cublasLtMatrixLayout_t Adesc,
                              const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta,
                              const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo,
                              void* workspace, size_t workspaceSizeInBytes, cudaStream_t) {
  (void)workspace;
  (void)workspaceSizeInBytes;
  if (lightHandle == nullptr || lightHandle->magic != 0x17C0u) return CUBLAS_STATUS_NOT_INITIALIZED;
  Desc* d = desc_of(computeDesc);
  Layout *al = layout_of(Adesc), *bl = layout_of(Bdesc), *cl = layout_of(Cdesc), *dl = layout_of(Ddesc);
  if (d == nullptr || al == nullptr || bl == nullptr || cl == nullptr || dl == nullptr)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (alpha == nullptr || beta == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  const cublasStatus_t st = check_config(*d, *al, *bl, *cl, *dl, CUBLAS_STATUS_INVALID_VALUE);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  if (refuse_from_env() == Refuse::kMatmul && d->epilogue != CUBLASLT_EPILOGUE_DEFAULT)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  const float alpha_f = *static_cast<const float*>(alpha), beta_f = *static_cast<const float*>(beta);
  const int64_t m = int64_t(dl->rows), n = int64_t(dl->cols);
  const int64_t k = int64_t(d->transa == CUBLAS_OP_N ? al->cols : al->rows);
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  if (D == nullptr || (k > 0 && (A == nullptr || B == nullptr)) || (beta_f != 0.0f && C == nullptr))
    return CUBLAS_STATUS_INVALID_VALUE;
  // Element alignment always; the algorithm's assumed alignments when one is given.
  const size_t ab = type_bytes(al->type), cb = type_bytes(dl->type);
  if (alignment_of(A) < ab || alignment_of(B) < ab || alignment_of(D) < cb ||
      (C != nullptr && alignment_of(C) < cb))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (algo != nullptr) {
    Algo g;
    std::memcpy(&g, algo, sizeof(g));
    if (g.magic != kAlgoMagic) return CUBLAS_STATUS_INVALID_VALUE;
    const void* ptrs[6] = {A, B, C, D, epilogue_has_bias(d->epilogue) ? d->bias : nullptr,
                           epilogue_aux(d->epilogue) ? d->aux : nullptr};
    for (int i = 0; i < 6; i++)
      if (ptrs[i] != nullptr && alignment_of(ptrs[i]) < g.align[i]) return CUBLAS_STATUS_INVALID_VALUE;
  }

  std::vector<double> prod;
  if (k > 0 && alpha_f != 0.0f)
    prod = product(d->transa == CUBLAS_OP_T, d->transb == CUBLAS_OP_T, m, n, k, A, al->type,
                   al->ld, B, bl->type, bl->ld);
  // The whole result first (C may be D), then the stores.
  std::vector<double> x(size_t(m * n));
  for (int64_t j = 0; j < n; j++)
    for (int64_t i = 0; i < m; i++) {
      double v = prod.empty() ? 0.0 : double(alpha_f) * prod[size_t(i + j * m)];
      if (beta_f != 0.0f) v += double(beta_f) * load(C, cl->type, size_t(i + j * cl->ld));
      x[size_t(i + j * m)] = v;
    }
  const cudaDataType_t t = dl->type;
  const uint32_t e = d->epilogue;
  for (int64_t j = 0; j < n; j++)
    for (int64_t i = 0; i < m; i++) {
      double v = x[size_t(i + j * m)];
      const size_t ai = size_t(i + j * d->aux_ld);
      if (epilogue_has_bias(e)) v += load(d->bias, t, size_t(i));  // one per row of D
      if (e == CUBLASLT_EPILOGUE_DGELU) v *= gelu_tanh_grad(load(d->aux, t, ai));
      if (epilogue_aux(e) && e != CUBLASLT_EPILOGUE_DGELU) store(d->aux, t, ai, v);
      if (epilogue_gelu(e)) v = gelu_tanh(v);
      store(D, t, size_t(i + j * dl->ld), v);
    }
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
