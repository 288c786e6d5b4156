// precision.attention = "cudnn" (src/backend/cuda/cudnn_sdpa.h): the CUDA backend's attention
// through cuDNN's fused flash attention, against
//   - the CPU backend's bf16 attention (materialised, fp32 arithmetic on the same bf16 inputs):
//     out and dq / dk / dv, each within relative Frobenius error 1e-2 -- the flash kernel's bf16
//     tolerance (tests/gpu/test_flash_attention.cpp: bf16's 2^-9 relative rounding of P / dS before
//     their products and of the outputs, fp32 accumulation);
//   - a double-precision logsumexp computed here from the bf16 inputs: the state must be the
//     flash kernel's lse (natural log of sum_j<=t exp(q_t.k_j / sqrt(HS))), |d| <= 1e-4 (1 + |lse|)
//     (fp32 scores of exact bf16 products);
//   - baton's flash kernel (precision.attention = "flash", same backend otherwise): lse within 1e-4,
//     out / dqkv within 2e-2 (each kernel is within 1e-2 of the CPU), and the states interchange: each
//     kernel's backward from the other's forward state matches its own within 1e-2;
//   - itself: two runs give identical bits (deterministic engines only).
// Shapes: T not a multiple of 64 (37, 65, 130), B * NH > 1, head sizes 32, 64, 128 and 40 (a
// multiple of 8 the flash kernel lacks: compared with the CPU only). Errors: fp32 compute, head sizes
// cuDNN lacks (36, 136), "flash" with head size 40. BATON_CUDNN_EMU_NO_ENGINES=1 (the emulator's
// "no engine" switch; skipped otherwise): the error names the step, the shape and cuDNN's status.
// Label `gpu` (part B runs it on a GPU); also built against the host emulators
// (tests/emu/emulated_blas.cmake: unit.test_cudnn_sdpa_emulated), where cuDNN is
// tests/emu/cudnn_emu.cpp's graph interpreter.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "../support/gpu_test.h"
#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/rng.h"

namespace baton {
namespace {

struct Shape {
  int B, T, NH, HS;
  int C() const { return NH * HS; }
  std::string name() const {
    return "B=" + std::to_string(B) + " T=" + std::to_string(T) + " NH=" + std::to_string(NH) +
           " HS=" + std::to_string(HS);
  }
};

std::vector<uint16_t> random_bf16(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = f32_to_bf16(rng.normal());
  return v;
}
std::vector<float> widen(const std::vector<uint16_t>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); i++) r[i] = bf16_to_f32(v[i]);
  return r;
}

// One backend's attention on given host inputs: out, state and dqkv back on the host.
struct Result {
  std::vector<float> out, dqkv;
  std::vector<float> state;
  std::vector<uint16_t> out_bits, dqkv_bits;
};
class Runner {
 public:
  explicit Runner(std::unique_ptr<Backend> be) : be_(std::move(be)) {}
  Backend& be() { return *be_; }
  // `state_in`: run the backward from this state instead of the forward's (interchange checks).
  Result run(const Shape& s, const std::vector<uint16_t>& qkv, const std::vector<uint16_t>& dout,
             const std::vector<float>* state_in = nullptr) {
    const size_t n = size_t(s.B) * s.T * s.C(), ns = be_->attention_state_floats(s.B, s.T, s.C(), s.NH);
    void* dq = be_->alloc(3 * n * 2);
    void* dd = be_->alloc(n * 2);
    void* dout_d = be_->alloc(n * 2);
    void* dg = be_->alloc(3 * n * 2);
    float* st = static_cast<float*>(be_->alloc(ns * 4));
    be_->to_device(dq, qkv.data(), 3 * n * 2);
    be_->to_device(dout_d, dout.data(), n * 2);
    be_->attention_forward(dd, st, dq, s.B, s.T, s.C(), s.NH);
    Result r;
    r.state.resize(ns);
    be_->to_host(r.state.data(), st, ns * 4);
    if (state_in != nullptr) be_->to_device(st, state_in->data(), ns * 4);
    be_->attention_backward(dg, dout_d, dd, dq, st, s.B, s.T, s.C(), s.NH);
    r.out_bits.resize(n);
    r.dqkv_bits.resize(3 * n);
    be_->to_host(r.out_bits.data(), dd, n * 2);
    be_->to_host(r.dqkv_bits.data(), dg, 3 * n * 2);
    r.out = widen(r.out_bits);
    r.dqkv = widen(r.dqkv_bits);
    for (void* p : {dq, dd, dout_d, dg, static_cast<void*>(st)}) be_->release(p);
    return r;
  }

 private:
  std::unique_ptr<Backend> be_;
};

// ||a - b|| / ||b|| over the elements pick(i) selects.
template <typename Pick>
double rel_frobenius(const std::vector<float>& a, const std::vector<float>& b, Pick pick) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); i++) {
    if (!pick(i)) continue;
    const double d = double(a[i]) - b[i];
    num += d * d;
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}
// out as a whole; dqkv per part (dq, dk, dv: columns [0, C), [C, 2C), [2C, 3C) of each token).
void expect_close(const Shape& s, const Result& got, const Result& ref, double tol, const std::string& what) {
  EXPECT_LE(rel_frobenius(got.out, ref.out, [](size_t) { return true; }), tol) << what << " out";
  const char* part[] = {"dq", "dk", "dv"};
  for (int p = 0; p < 3; p++) {
    const double e = rel_frobenius(got.dqkv, ref.dqkv, [&](size_t i) { return int(i / s.C()) % 3 == p; });
    EXPECT_LE(e, tol) << what << " " << part[p];
  }
}

// lse[b, h, t] = log sum_{j <= t} exp(q_t . k_j / sqrt(HS)) in double from the bf16 inputs.
std::vector<double> reference_lse(const Shape& s, const std::vector<uint16_t>& qkv) {
  const std::vector<float> x = widen(qkv);
  const int C = s.C();
  std::vector<double> lse(size_t(s.B) * s.NH * s.T);
  for (int b = 0; b < s.B; b++)
    for (int h = 0; h < s.NH; h++)
      for (int t = 0; t < s.T; t++) {
        std::vector<double> sc(size_t(t) + 1);
        double m = -1e300;
        for (int j = 0; j <= t; j++) {
          double d = 0;
          for (int k = 0; k < s.HS; k++)
            d += double(x[(size_t(b) * s.T + t) * 3 * C + h * s.HS + k]) *
                 x[(size_t(b) * s.T + j) * 3 * C + C + h * s.HS + k];
          sc[size_t(j)] = d / std::sqrt(double(s.HS));
          m = std::max(m, sc[size_t(j)]);
        }
        double z = 0;
        for (double v : sc) z += std::exp(v - m);
        lse[(size_t(b) * s.NH + h) * s.T + t] = m + std::log(z);
      }
  return lse;
}

class CudnnSdpa : public ::testing::Test {
 protected:
  void SetUp() override { BATON_GPU_TEST_OR_SKIP(); }
  static std::unique_ptr<Backend> cuda(AttentionKernel k) { return make_cuda_backend(0, DType::BF16, k); }
};

const std::vector<Shape> kShapes = {{1, 64, 2, 32}, {2, 37, 3, 32}, {1, 130, 2, 64}, {2, 65, 1, 128}, {2, 33, 2, 40}};

TEST_F(CudnnSdpa, MatchesCpuBf16AttentionAndTheDoubleLse) {
  Runner gpu(cuda(AttentionKernel::CUDNN)), cpu(make_cpu_backend(DType::BF16, CpuBf16::EMULATED));
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(s.name());
    const size_t n = size_t(s.B) * s.T * s.C();
    const auto qkv = random_bf16(3 * n, 1000 + s.T), dout = random_bf16(n, 2000 + s.T);
    EXPECT_EQ(gpu.be().attention_state_floats(s.B, s.T, s.C(), s.NH), size_t(s.B) * s.NH * s.T);
    const Result g = gpu.run(s, qkv, dout), c = cpu.run(s, qkv, dout);
    expect_close(s, g, c, 1e-2, "cudnn vs cpu bf16");
    const std::vector<double> lse = reference_lse(s, qkv);
    size_t bad = 0;
    for (size_t i = 0; i < lse.size(); i++)
      if (!(std::fabs(g.state[i] - lse[i]) <= 1e-4 * (1 + std::fabs(lse[i]))) && bad++ < 3)
        ADD_FAILURE() << "lse[" << i << "] = " << g.state[i] << ", reference " << lse[i];
    EXPECT_EQ(bad, 0u);
  }
  EXPECT_NE(gpu.be().kernel_summary().find("cuDNN SDPA"), std::string::npos) << gpu.be().kernel_summary();
}

TEST_F(CudnnSdpa, MatchesFlashAndTheStatesInterchange) {
  Runner cud(cuda(AttentionKernel::CUDNN)), fl(cuda(AttentionKernel::FLASH));
  for (const Shape& s : {kShapes[1], kShapes[2]}) {
    SCOPED_TRACE(s.name());
    const size_t n = size_t(s.B) * s.T * s.C();
    const auto qkv = random_bf16(3 * n, 3000 + s.T), dout = random_bf16(n, 4000 + s.T);
    const Result c = cud.run(s, qkv, dout), f = fl.run(s, qkv, dout);
    ASSERT_EQ(c.state.size(), f.state.size());
    for (size_t i = 0; i < c.state.size(); i++)
      ASSERT_LE(std::fabs(c.state[i] - f.state[i]), 1e-4 * (1 + std::fabs(f.state[i]))) << "lse " << i;
    expect_close(s, c, f, 2e-2, "cudnn vs flash");
    // Each kernel's backward from the other's state.
    expect_close(s, cud.run(s, qkv, dout, &f.state), c, 1e-2, "cudnn backward from flash's state");
    expect_close(s, fl.run(s, qkv, dout, &c.state), f, 1e-2, "flash backward from cudnn's state");
  }
}

TEST_F(CudnnSdpa, Deterministic) {
  Runner gpu(cuda(AttentionKernel::CUDNN));
  const Shape s = kShapes[1];
  const size_t n = size_t(s.B) * s.T * s.C();
  const auto qkv = random_bf16(3 * n, 5), dout = random_bf16(n, 6);
  const Result a = gpu.run(s, qkv, dout), b = gpu.run(s, qkv, dout);
  EXPECT_EQ(a.out_bits, b.out_bits);
  EXPECT_EQ(a.dqkv_bits, b.dqkv_bits);
  EXPECT_EQ(a.state, b.state);
}

// The message of the Error `f` throws ("" when it does not).
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return std::string(e.what()) + " | hint: " + e.hint();
  }
  return "";
}

TEST_F(CudnnSdpa, RefusesWhatItCannotRun) {
  const std::string fp32 = error_of([] { make_cuda_backend(0, DType::F32, AttentionKernel::CUDNN); });
  EXPECT_NE(fp32.find("bf16"), std::string::npos) << fp32;
  EXPECT_NE(fp32.find("hint: "), std::string::npos) << fp32;
  auto be = cuda(AttentionKernel::CUDNN);
  for (int hs : {36, 136}) {
    const std::string e = error_of([&] { be->attention_state_floats(1, 16, 2 * hs, 2); });
    EXPECT_NE(e.find("head size " + std::to_string(hs)), std::string::npos) << e;
  }
  auto flash = cuda(AttentionKernel::FLASH);
  const std::string e = error_of([&] { flash->attention_state_floats(1, 16, 80, 2); });
  EXPECT_NE(e.find("precision.attention = \"flash\""), std::string::npos) << e;
}

// Run with BATON_CUDNN_EMU_NO_ENGINES=1 (emulated build only): cuDNN offers no engine.
TEST_F(CudnnSdpa, NoEngineIsAClearError) {
  const char* env = std::getenv("BATON_CUDNN_EMU_NO_ENGINES");
  if (env == nullptr || std::string(env) != "1") GTEST_SKIP() << "needs BATON_CUDNN_EMU_NO_ENGINES=1 (the emulator)";
  Runner gpu(cuda(AttentionKernel::CUDNN));
  const Shape s = kShapes[0];
  const size_t n = size_t(s.B) * s.T * s.C();
  const std::string e = error_of([&] { gpu.run(s, random_bf16(3 * n, 1), random_bf16(n, 2)); });
  for (const char* part : {"cuDNN SDPA forward", "B=1 T=64 NH=2 HS=32", "no deterministic engine", "NOT_SUPPORTED",
                           "no engine supports the graph", "hint: "})
    EXPECT_NE(e.find(part), std::string::npos) << part << " not in: " << e;
}

}  // namespace
}  // namespace baton
