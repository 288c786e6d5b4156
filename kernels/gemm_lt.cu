// cuBLASLt GEMMs with epilogues (see gemm_lt.cuh). Row-major -> column-major: D^T[N,M] =
// op(B)^T op(A)^T, so cuBLASLt's "A" is our B, its "B" our A, its m = N, n = M, and the vectors
// and matrices of the epilogue are indexed by cuBLASLt's rows = our columns (bias[N], aux ld >= N).
#include <array>
#include <map>
#include <string>

#include "kernels/common.cuh"
#include "kernels/gemm_lt.cuh"

namespace baton::kernels {
namespace {

constexpr int kThreads = 256;
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)

void check_lt(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("LtGemm: ") + what + ": " + cublasLtGetStatusName(st) + " (" +
                             cublasLtGetStatusString(st) + ")");
}

// Largest power of two (<= 256) dividing the address: what the heuristic must assume.
uint32_t alignment_of(const void* p) {
  const uintptr_t v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && v % a != 0) a >>= 1;
  return a;
}

size_t dtype_bytes(cudaDataType_t t) { return t == CUDA_R_16BF ? 2 : 4; }

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T from_f(float x);
template <>
__device__ __forceinline__ float from_f<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// The expressions of kernels/gelu.cu (tanh form, tanhf: no fast-math approximation).
__device__ __forceinline__ float gelu_tanh(float x) {
  const float cube = 0.044715f * x * x * x;
  return 0.5f * x * (1.0f + tanhf(kGeluScale * (x + cube)));
}
__device__ __forceinline__ float gelu_tanh_grad(float x) {
  const float u = kGeluScale * (x + 0.044715f * x * x * x);
  const float th = tanhf(u);
  const float sech2 = 1.0f - th * th;
  const float du_dx = kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
  return 0.5f * (1.0f + th) + 0.5f * x * sech2 * du_dx;
}

// Fallback epilogues over a row-major [M, N] output (grid-stride over the M*N elements).
template <typename T>
__global__ void bias_epilogue_kernel(T* d, long long ldd, const T* bias, int M, int N) {
  const size_t total = size_t(M) * N;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x) {
    const size_t r = i / N, c = i % N;
    T* p = d + r * ldd + c;
    *p = from_f<T>(to_f(*p) + to_f(bias[c]));
  }
}

// aux holds the GEMM result: aux = result + bias (rounded to T), d = gelu(result + bias) from the
// unrounded fp32 sum (as the fused epilogue computes both from its fp32 accumulator).
template <typename T>
__global__ void gelu_aux_bias_epilogue_kernel(T* d, long long ldd, T* aux, long long ldaux, const T* bias,
                                              int M, int N) {
  const size_t total = size_t(M) * N;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x) {
    const size_t r = i / N, c = i % N;
    T* pa = aux + r * ldaux + c;
    const float x = to_f(*pa) + (bias != nullptr ? to_f(bias[c]) : 0.0f);
    *pa = from_f<T>(x);
    d[r * ldd + c] = from_f<T>(gelu_tanh(x));
  }
}

template <typename T>
__global__ void dgelu_epilogue_kernel(T* d, long long ldd, const T* aux, long long ldaux, int M, int N) {
  const size_t total = size_t(M) * N;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x) {
    const size_t r = i / N, c = i % N;
    T* p = d + r * ldd + c;
    *p = from_f<T>(gelu_tanh_grad(to_f(aux[r * ldaux + c])) * to_f(*p));
  }
}

int blocks_for(size_t n) { return int(std::min<size_t>((n + kThreads - 1) / kThreads, 65535u * 8)); }

template <typename T>
void run_fallback(const LtMatmulArgs& a, cudaStream_t s) {
  const size_t n = size_t(a.M) * size_t(a.N);
  T* d = static_cast<T*>(a.D);
  const T* bias = static_cast<const T*>(a.bias);
  switch (a.epilogue) {
    case LtEpilogue::Default:
      return;
    case LtEpilogue::Bias:
      bias_epilogue_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(d, a.ldd, bias, a.M, a.N);
      break;
    case LtEpilogue::GeluAuxBias:
      gelu_aux_bias_epilogue_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(d, a.ldd, static_cast<T*>(a.aux),
                                                                         a.ldaux, bias, a.M, a.N);
      break;
    case LtEpilogue::DGelu:
      dgelu_epilogue_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(d, a.ldd, static_cast<const T*>(a.aux),
                                                                 a.ldaux, a.M, a.N);
      break;
  }
  check_launch("LtGemm fallback epilogue");
}

cublasLtEpilogue_t lt_epilogue(const LtMatmulArgs& a) {
  switch (a.epilogue) {
    case LtEpilogue::Default: return CUBLASLT_EPILOGUE_DEFAULT;
    case LtEpilogue::Bias: return CUBLASLT_EPILOGUE_BIAS;
    case LtEpilogue::GeluAuxBias: return a.bias != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    case LtEpilogue::DGelu: return CUBLASLT_EPILOGUE_DGELU;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

bool uses_aux(LtEpilogue e) { return e == LtEpilogue::GeluAuxBias || e == LtEpilogue::DGelu; }

// The documented constraints of a fused epilogue (cublasLt.h, CUDA 13.1) plus the conservative
// 16-byte alignment of the epilogue vectors. False -> DEFAULT GEMM + fallback kernel.
bool fusable(const LtMatmulArgs& a) {
  if (a.epilogue == LtEpilogue::Default) return true;
  if (a.bias != nullptr && alignment_of(a.bias) < 16) return false;
  if (uses_aux(a.epilogue)) {
    // CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: "GELU input matrix leading dimension in elements ...
    // Must be divisible by 8 and be no less than the number of rows in the output matrix."
    if (a.ldaux % 8 != 0 || a.ldaux < a.N) return false;
    if (alignment_of(a.aux) < 16) return false;
  }
  return true;
}

}  // namespace

struct LtGemm::Impl {
  // One cached GEMM configuration: descriptor, layouts (cuBLASLt's A = our B, its B = our A,
  // its C = D = the GEMM output) and the heuristic's algorithm.
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool fused = false;
    Plan() = default;
    Plan(const Plan&) = delete;
    Plan& operator=(const Plan&) = delete;
    ~Plan() {
      if (ld) cublasLtMatrixLayoutDestroy(ld);
      if (lb) cublasLtMatrixLayoutDestroy(lb);
      if (la) cublasLtMatrixLayoutDestroy(la);
      if (desc) cublasLtMatmulDescDestroy(desc);
    }
  };
  using Key = std::array<int64_t, 20>;

  cudaStream_t stream = nullptr;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  bool fuse = true;
  size_t queries = 0, fallbacks = 0;
  bool last_fused = true;
  std::map<Key, std::unique_ptr<Plan>> plans;

  // A Default call has no epilogue to fuse: the switch does not apply to it.
  bool allow_fused(const LtMatmulArgs& a) const { return fuse || a.epilogue == LtEpilogue::Default; }

  Key key_of(const LtMatmulArgs& a) const {
    return Key{a.trans_a, a.trans_b, a.M, a.N, a.K, a.lda, a.ldb, a.ldd,
               uses_aux(a.epilogue) ? a.ldaux : 0, int64_t(a.ab_type), int64_t(a.cd_type),
               int64_t(a.epilogue), allow_fused(a), a.bias != nullptr, a.aux != nullptr,
               alignment_of(a.A), alignment_of(a.B), alignment_of(a.D),
               a.bias ? alignment_of(a.bias) : 0, a.aux ? alignment_of(a.aux) : 0};
  }

  // Sets the per-call pointers of a fused plan's epilogue (the heuristic also reads them to infer
  // their alignment, so they are set before it runs).
  static void set_epilogue_pointers(Plan& p, const LtMatmulArgs& a) {
    if (a.bias != nullptr)
      check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &a.bias, sizeof(a.bias)),
               "set BIAS_POINTER");
    if (uses_aux(a.epilogue))
      check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &a.aux,
                                              sizeof(a.aux)),
               "set EPILOGUE_AUX_POINTER");
  }

  // Builds a plan with the fused epilogue (fused) or DEFAULT writing the GEMM result into `out`
  // (D, or aux for the GELU fallback). Returns null when the heuristic offers no algorithm.
  std::unique_ptr<Plan> build(const LtMatmulArgs& a, bool fused, const void* out, int ldout) {
    auto p = std::make_unique<Plan>();
    p->fused = fused;
    check_lt(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
    const int32_t op_a = a.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = a.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    check_lt(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)), "set TRANSA");
    check_lt(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)), "set TRANSB");
    const uint32_t epi = fused ? uint32_t(lt_epilogue(a)) : uint32_t(CUBLASLT_EPILOGUE_DEFAULT);
    check_lt(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)), "set EPILOGUE");
    if (fused && a.epilogue != LtEpilogue::Default) {
      if (a.bias != nullptr) {
        // CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: bias elements have D's type (non-IMMA, non-fp8).
        // CUBLASLT_EPILOGUE_BIAS: length = rows of (column-major) D = our N, packed.
        const int32_t bt = int32_t(a.cd_type);
        check_lt(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)),
                 "set BIAS_DATA_TYPE");
      }
      if (uses_aux(a.epilogue)) {
        // EPILOGUE_AUX_LD: divisible by 8 and >= rows of D (our N); aux type = D's type
        // (EPILOGUE_AUX_DATA_TYPE default). fusable() guarantees it; asserted here.
        BATON_KCHECK("LtGemm", a.ldaux % 8 == 0 && a.ldaux >= a.N);
        const int64_t ldaux = a.ldaux;
        check_lt(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ldaux, sizeof(ldaux)),
                 "set EPILOGUE_AUX_LD");
      }
      set_epilogue_pointers(*p, a);
    }
    // Layouts of the stored (column-major) matrices: our B as cuBLASLt's A, our A as its B.
    check_lt(cublasLtMatrixLayoutCreate(&p->la, a.ab_type, a.trans_b ? a.K : a.N, a.trans_b ? a.N : a.K, a.ldb),
             "cublasLtMatrixLayoutCreate(A)");
    check_lt(cublasLtMatrixLayoutCreate(&p->lb, a.ab_type, a.trans_a ? a.M : a.K, a.trans_a ? a.K : a.M, a.lda),
             "cublasLtMatrixLayoutCreate(B)");
    check_lt(cublasLtMatrixLayoutCreate(&p->ld, a.cd_type, a.N, a.M, ldout), "cublasLtMatrixLayoutCreate(D)");

    cublasLtMatmulPreference_t pref = nullptr;
    check_lt(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
    const uint64_t ws = kWorkspaceBytes;
    // Pointer alignments (default preference: 256 bytes, which would let the heuristic pick an
    // algorithm that faults on a less aligned buffer).
    const uint32_t al_a = alignment_of(a.B), al_b = alignment_of(a.A), al_d = alignment_of(out);
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a));
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b));
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof(al_d));
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof(al_d));
    cublasLtMatmulHeuristicResult_t res{};
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS) {
      ++queries;
      st = cublasLtMatmulAlgoGetHeuristic(handle, p->desc, p->la, p->lb, p->ld, p->ld, pref, 1, &res, &found);
    }
    cublasLtMatmulPreferenceDestroy(pref);
    const bool none = st != CUBLAS_STATUS_SUCCESS || found == 0 || res.state != CUBLAS_STATUS_SUCCESS;
    // A fused epilogue the library rejects for this configuration (any status): fall back.
    if (none && fused && a.epilogue != LtEpilogue::Default) return nullptr;
    check_lt(st, "cublasLtMatmulAlgoGetHeuristic");
    if (none) check_lt(found == 0 ? CUBLAS_STATUS_NOT_SUPPORTED : res.state, "no cuBLASLt algorithm for this GEMM");
    BATON_KCHECK("LtGemm", res.workspaceSize <= kWorkspaceBytes);
    p->algo = res.algo;
    return p;
  }

  // The DEFAULT-epilogue plan whose GEMM result goes where the fallback kernel expects it.
  std::unique_ptr<Plan> build_unfused(const LtMatmulArgs& a) {
    const bool to_aux = a.epilogue == LtEpilogue::GeluAuxBias;
    return build(a, false, to_aux ? a.aux : a.D, to_aux ? a.ldaux : a.ldd);
  }

  std::unique_ptr<Plan>& plan_for(const LtMatmulArgs& a) {
    const Key k = key_of(a);
    auto it = plans.find(k);
    if (it != plans.end()) return it->second;
    std::unique_ptr<Plan> p;
    if (allow_fused(a) && fusable(a)) p = build(a, true, a.D, a.ldd);
    if (!p) p = build_unfused(a);
    return plans.emplace(k, std::move(p)).first->second;
  }

  cublasStatus_t run(const Plan& p, const LtMatmulArgs& a) {
    void* out = !p.fused && a.epilogue == LtEpilogue::GeluAuxBias ? a.aux : a.D;
    return cublasLtMatmul(handle, p.desc, &a.alpha, a.B, p.la, a.A, p.lb, &a.beta, out, p.ld, out, p.ld, &p.algo,
                          workspace, kWorkspaceBytes, stream);
  }
};

LtGemm::LtGemm(cudaStream_t stream) : impl_(std::make_unique<Impl>()) {
  impl_->stream = stream;
  check_lt(cublasLtCreate(&impl_->handle), "cublasLtCreate");
  const cudaError_t e = cudaMalloc(&impl_->workspace, kWorkspaceBytes);
  if (e != cudaSuccess) {
    cublasLtDestroy(impl_->handle);
    check_cuda(e, "LtGemm workspace");
  }
}

LtGemm::~LtGemm() {
  impl_->plans.clear();
  cudaFree(impl_->workspace);
  cublasLtDestroy(impl_->handle);
}

cudaStream_t LtGemm::stream() const { return impl_->stream; }
void LtGemm::set_fused_epilogues(bool on) { impl_->fuse = on; }
bool LtGemm::fused_epilogues() const { return impl_->fuse; }
size_t LtGemm::heuristic_queries() const { return impl_->queries; }
size_t LtGemm::cached_plans() const { return impl_->plans.size(); }
size_t LtGemm::fallback_calls() const { return impl_->fallbacks; }
bool LtGemm::last_fused() const { return impl_->last_fused; }

void LtGemm::matmul(const LtMatmulArgs& a) {
  const char* op = "LtGemm::matmul";
  BATON_KCHECK(op, a.M >= 0 && a.N >= 0 && a.K >= 0);
  BATON_KCHECK(op, (a.ab_type == CUDA_R_16BF && (a.cd_type == CUDA_R_16BF || a.cd_type == CUDA_R_32F)) ||
                       (a.ab_type == CUDA_R_32F && a.cd_type == CUDA_R_32F));
  if (a.M == 0 || a.N == 0) return;
  BATON_KCHECK(op, a.K > 0);
  BATON_KCHECK(op, a.A != nullptr && a.B != nullptr && a.D != nullptr);
  BATON_KCHECK(op, a.lda >= (a.trans_a ? a.M : a.K) && a.ldb >= (a.trans_b ? a.K : a.N) && a.ldd >= a.N);
  // Epilogue inputs: bias[N] of D's type; aux [M, >= N] (cublasLt.h EPILOGUE_AUX_LD: no less than
  // the rows of the column-major output = our N).
  if (a.epilogue == LtEpilogue::Bias) BATON_KCHECK(op, a.bias != nullptr && a.aux == nullptr);
  if (a.epilogue == LtEpilogue::DGelu) BATON_KCHECK(op, a.bias == nullptr);
  if (a.epilogue == LtEpilogue::Default) BATON_KCHECK(op, a.bias == nullptr && a.aux == nullptr);
  if (uses_aux(a.epilogue)) {
    BATON_KCHECK(op, a.aux != nullptr && a.aux != a.D && a.ldaux >= a.N);
    // The GELU epilogues are defined for a fresh product only (what beta * C would mean under
    // GELU/DGELU is not what a caller wants; the dense layer never needs it).
    BATON_KCHECK(op, a.beta == 0.0f);
  }
  // Element-aligned pointers (the fallback kernels and cuBLASLt both need that much).
  const size_t eb = dtype_bytes(a.ab_type), cb = dtype_bytes(a.cd_type);
  BATON_KCHECK(op, alignment_of(a.A) >= eb && alignment_of(a.B) >= eb && alignment_of(a.D) >= cb);
  BATON_KCHECK(op, (a.bias == nullptr || alignment_of(a.bias) >= cb) && (a.aux == nullptr || alignment_of(a.aux) >= cb));

  std::unique_ptr<Impl::Plan>& slot = impl_->plan_for(a);
  if (slot->fused) Impl::set_epilogue_pointers(*slot, a);
  cublasStatus_t st = impl_->run(*slot, a);
  if ((st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE) && slot->fused &&
      a.epilogue != LtEpilogue::Default) {
    // The fused algorithm was refused at launch (validation happens before any kernel runs):
    // cache the DEFAULT + fallback plan for this key instead.
    slot = impl_->build_unfused(a);
    st = impl_->run(*slot, a);
  }
  check_lt(st, "cublasLtMatmul");
  impl_->last_fused = slot->fused || a.epilogue == LtEpilogue::Default;
  if (impl_->last_fused) return;
  ++impl_->fallbacks;
  if (a.cd_type == CUDA_R_16BF)
    run_fallback<__nv_bfloat16>(a, impl_->stream);
  else
    run_fallback<float>(a, impl_->stream);
}

}  // namespace baton::kernels
