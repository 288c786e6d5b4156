// Dense layer in bf16 (see matmul_bf16.cuh): three cuBLASLt GEMMs with epilogues and a
// deterministic two-stage column sum of the bf16 output gradient for dbias.
//
// dbias is not taken from cuBLASLt's BGRADB epilogue: it overwrites its output (dbias must
// accumulate across micro-batches), it exists only with the dweight GEMM (dweight may be null
// alone) and its reduction order is the library's. The column sum here reads dout once more
// (N*OC bf16) with kernels/reduce.cu's column sum (fixed partition and order).
#include "kernels/common.cuh"
#include "kernels/elementwise.cuh"
#include "kernels/gemm_lt.cuh"
#include "kernels/matmul_bf16.cuh"
#include "kernels/reduce.cuh"

namespace baton::kernels {
namespace {

void check_stream(const LtGemm& lt, cudaStream_t s, const char* op) { BATON_KCHECK(op, s == lt.stream()); }

}  // namespace

void matmul_forward_bf16(LtGemm& lt, __nv_bfloat16* out, const __nv_bfloat16* inp, const __nv_bfloat16* weight,
                         const __nv_bfloat16* bias, int N, int C, int OC, __nv_bfloat16* gelu_out, cudaStream_t s) {
  const char* op = "matmul_forward_bf16";
  BATON_KCHECK(op, N >= 0 && C > 0 && OC > 0);
  check_stream(lt, s, op);
  if (N == 0) return;
  BATON_KCHECK(op, out != nullptr && inp != nullptr && weight != nullptr && gelu_out != out);
  LtMatmulArgs a;
  a.trans_a = false;
  a.trans_b = true;  // weight[OC, C] is op(B)^T
  a.M = N;
  a.N = OC;
  a.K = C;
  a.A = inp;
  a.lda = C;
  a.B = weight;
  a.ldb = C;
  a.ab_type = a.cd_type = CUDA_R_16BF;
  a.bias = bias;
  if (gelu_out != nullptr) {
    a.epilogue = LtEpilogue::GeluAuxBias;
    a.D = gelu_out;
    a.ldd = OC;
    a.aux = out;
    a.ldaux = OC;
  } else {
    a.epilogue = bias != nullptr ? LtEpilogue::Bias : LtEpilogue::Default;
    a.D = out;
    a.ldd = OC;
  }
  lt.matmul(a);
}

size_t matmul_backward_bf16_scratch_floats(int N, int OC) { return column_sum_scratch_floats(N, OC); }

void matmul_backward_bf16(LtGemm& lt, __nv_bfloat16* dinp, float* dweight, float* dbias, const __nv_bfloat16* dout,
                          const __nv_bfloat16* inp, const __nv_bfloat16* weight, int N, int C, int OC,
                          bool accumulate_dinp, bool accumulate_dweight, const __nv_bfloat16* dgelu_pre,
                          float* scratch, size_t scratch_floats, cudaStream_t s) {
  const char* op = "matmul_backward_bf16";
  BATON_KCHECK(op, N >= 0 && C > 0 && OC > 0);
  check_stream(lt, s, op);
  if (N == 0) {  // empty sums: written parameter gradients are zeros (column_sum's rule for dbias)
    if (!accumulate_dweight && dweight != nullptr) zero(dweight, size_t(OC) * C, s);
    if (dbias != nullptr) column_sum(dbias, dout, N, OC, accumulate_dweight, scratch, scratch_floats, s);
    return;
  }
  BATON_KCHECK(op, dout != nullptr);
  if (dinp != nullptr) {
    BATON_KCHECK(op, weight != nullptr);
    BATON_KCHECK(op, !(accumulate_dinp && dgelu_pre != nullptr));
    BATON_KCHECK(op, dgelu_pre == nullptr || static_cast<const void*>(dgelu_pre) != static_cast<const void*>(dinp));
    // dinp[N, C] = dout[N, OC] . weight[OC, C]
    LtMatmulArgs a;
    a.M = N;
    a.N = C;
    a.K = OC;
    a.A = dout;
    a.lda = OC;
    a.B = weight;
    a.ldb = C;
    a.D = dinp;
    a.ldd = C;
    a.beta = accumulate_dinp ? 1.0f : 0.0f;
    a.ab_type = a.cd_type = CUDA_R_16BF;
    if (dgelu_pre != nullptr) {
      a.epilogue = LtEpilogue::DGelu;
      a.aux = const_cast<__nv_bfloat16*>(dgelu_pre);  // read only (DGELU's aux is an input)
      a.ldaux = C;
    }
    lt.matmul(a);
  }
  if (dweight != nullptr) {
    BATON_KCHECK(op, inp != nullptr);
    // dweight[OC, C] (+=|=) dout^T[OC, N] . inp[N, C], fp32 C/D with beta = 1 or 0.
    LtMatmulArgs a;
    a.trans_a = true;
    a.M = OC;
    a.N = C;
    a.K = N;
    a.A = dout;
    a.lda = OC;
    a.B = inp;
    a.ldb = C;
    a.D = dweight;
    a.ldd = C;
    a.beta = accumulate_dweight ? 1.0f : 0.0f;
    a.ab_type = CUDA_R_16BF;
    a.cd_type = CUDA_R_32F;
    lt.matmul(a);
  }
  if (dbias != nullptr) {
    BATON_KCHECK(op, scratch != nullptr && scratch_floats >= matmul_backward_bf16_scratch_floats(N, OC));
    column_sum(dbias, dout, N, OC, accumulate_dweight, scratch, scratch_floats, s);  // kernels/reduce.cu
  }
}

}  // namespace baton::kernels
