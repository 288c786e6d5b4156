// Native bf16 dense layers for the CPU backend (precision.compute = "bf16" on a CPU with avx512_bf16
// or amx_bf16): oneDNN matmul primitives on the bf16 tensors themselves, fp32 accumulation, fp32
// bias and weight gradients. The rounding points are the emulation's (cpu_backend.cpp) and the CUDA
// path's: a bf16 output is rounded once from its fp32 sum; dweight / dbias stay fp32. Only the
// summation order inside the dot products differs from the emulation's OpenBLAS sgemm.
//
// The primitives are DnnlGemm's (cpu_dnnl_gemm.h): built once per shape and cached.
#pragma once
#include <cstdint>
#include <memory>

namespace baton {

class CpuBf16Matmul {
 public:
  CpuBf16Matmul();
  ~CpuBf16Matmul();
  CpuBf16Matmul(const CpuBf16Matmul&) = delete;
  CpuBf16Matmul& operator=(const CpuBf16Matmul&) = delete;

  // out[N,OC] = inp[N,C] . weight[OC,C]^T + bias[OC] (bias nullable), out rounded once to bf16.
  void forward(uint16_t* out, const uint16_t* inp, const uint16_t* weight, const uint16_t* bias, int N, int C,
               int OC);
  // dinp[N,C] (= or +=) dout . weight (rounded once; nullable), dweight[OC,C] (+= or =,
  // accumulate_dweight) dout^T . inp and dbias[OC] likewise the column sums of dout (fp32, nullable).
  void backward(uint16_t* dinp, float* dweight, float* dbias, const uint16_t* dout, const uint16_t* inp,
                const uint16_t* weight, int N, int C, int OC, bool accumulate_dinp, bool accumulate_dweight);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace baton
