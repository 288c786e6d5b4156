// The flash-attention kernels (kernels/flash_attention.cu) run on the CPU emulator (cuda_emu.h)
// against their CPU twin (src/backend/cpu/cpu_flash_attention.h): forward out and lse, the rowdot
// D, backward dq/dk/dv, fp32 and bf16 kernels, T = 1, T not a multiple of the 64-row tile, HS
// 32/64/128, B > 1, NH > 1. This is the CPU-side test of the kernels' indexing, masking, tiling,
// barriers and mma fragment layouts; tests/gpu/test_flash_attention.cpp tests them on a device.
// The kernel source is turned into host C++ at build time (gen_host_kernels.py ->
// flash_attention_host.inc), so this always tests the current kernels.
//
// Tolerances (the reasoning of tests/gpu/test_flash_attention.cpp):
//   fp32 kernels, elementwise |emu - cpu| <= 1e-5 (|cpu| + max|cpu|): the same algorithm, tiles
//     and summation order as the twin; only D = rowsum(dO o O) is summed in another order (here
//     the kernels use the host's libm and no FMA contraction, so most elements match to the bit).
//   bf16 kernels, relative Frobenius error <= 1e-2 per tensor (out, dq, dk, dv), the twin run on
//     the bf16-rounded inputs: the kernels round P and dS to bf16 (8-bit mantissa, 2^-9
//     relative) before their products and round the outputs; lse (fp32; S is exact products of
//     bf16 summed in fp32) 1e-3. The emulated mma sums in double, no less accurate than the
//     hardware's.
// Outputs start as NaN and shared memory as NaN, so an element never written or computed from
// unwritten shared memory fails. A negative control swaps two rows of the emulated mma's A fragment
// and requires the bf16 comparison to fail.
// Refactoring aid: BATON_EMU_DUMP=file writes the raw bits of every output of the positive tests to
// that file (the emulator is deterministic; compare two dumps with cmp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/cpu_flash_attention.h"
#include "core/rng.h"
#include "cuda_emu.h"
#include "flash_attention_host.inc"  // generated from kernels/flash_attention.cu

namespace baton {
namespace {

namespace fk = ::baton::kernels;
using bf16 = __nv_bfloat16;

struct Shape {
  int B, T, NH, HS;
};
std::string name(const Shape& s) {
  return "B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " NH=" + std::to_string(s.NH) +
         " HS=" + std::to_string(s.HS);
}
// T = 1 (also with B, NH > 1), below one tile with two heads, exactly one tile, three tiles with a
// partial last one, two batches of HS 128 with a partial second tile.
const std::vector<Shape> kShapes = {{1, 1, 1, 64},  {2, 1, 2, 32},   {1, 37, 2, 32},
                                    {1, 64, 1, 32}, {1, 130, 1, 64}, {2, 70, 1, 128}};

// ---- bf16 on the host (cuda_bf16.h's host conversions: round to nearest even) --------------
std::vector<bf16> to_bf16(const std::vector<float>& v) {
  std::vector<bf16> r(v.size());
  std::transform(v.begin(), v.end(), r.begin(), [](float x) { return __float2bfloat16_rn(x); });
  return r;
}
std::vector<float> to_float(const std::vector<bf16>& v) {
  std::vector<float> r(v.size());
  std::transform(v.begin(), v.end(), r.begin(), [](bf16 x) { return __bfloat162float(x); });
  return r;
}
std::vector<float> round_bf16(const std::vector<float>& v) { return to_float(to_bf16(v)); }

// ---- comparisons (AssertionResult, so that the negative control can require a failure) ------
// The reference scale (max|cpu| elementwise, RMS for Frobenius) has a floor: at T = 1, dq and dk
// are analytically zero (dP - D = 0) and the twin gets exactly 0 (its dP and D are the same dot
// product), while the kernels keep the cancellation residue of dP - D (rowdot sums D in another
// order): ~1 ulp of |D| ~ sqrt(HS) ~ 6, times scale and |k|, i.e. up to ~3e-7 (1.3e-7 seen at
// B=2 T=1 NH=2 HS=32). Elementwise, atol = 1e-5 x 0.1 = 1e-6 covers it; a real slip is O(1) there.
// (tests/gpu/test_flash_attention.cpp uses the same floors.) Frobenius: 1e-2 as there.
constexpr double kScaleFloor = 1e-2, kCloseScaleFloor = 1e-1;
constexpr double kFp32Tol = 1e-5, kBf16Frob = 1e-2, kBf16LseFrob = 1e-3;

using Pick = bool (*)(size_t, int);  // (index, C) -> element selected
bool pick_all(size_t, int) { return true; }
template <int Part>
bool pick_part(size_t i, int C) {  // the q, k or v column block of a [B,T,3C] tensor
  return int((i % (size_t(3) * C)) / C) == Part;
}

// |got - ref| <= tol |ref| + tol max|ref| elementwise over the selected elements; NaN fails.
testing::AssertionResult close_fp32(const std::vector<float>& got, const std::vector<float>& ref,
                                    int C = 0, Pick pick = pick_all) {
  if (got.size() != ref.size()) return testing::AssertionFailure() << "size mismatch";
  double maxabs = kCloseScaleFloor;
  for (size_t i = 0; i < ref.size(); i++)
    if (pick(i, C)) maxabs = std::max(maxabs, double(std::fabs(ref[i])));
  size_t bad = 0, first = 0, n = 0;
  for (size_t i = 0; i < ref.size(); i++) {
    if (!pick(i, C)) continue;
    n++;
    const double d = std::fabs(double(got[i]) - double(ref[i]));
    if (!(d <= kFp32Tol * (std::fabs(double(ref[i])) + maxabs)) && bad++ == 0) first = i;
  }
  if (bad == 0) return testing::AssertionSuccess();
  return testing::AssertionFailure()
         << bad << " of " << n << " out of tolerance (first at " << first << ": emu " << got[first]
         << " cpu " << ref[first] << ")";
}
// ||got - ref||_F / max(||ref||_F, floor) <= lim over the selected elements, all finite.
testing::AssertionResult frob(const std::vector<float>& got, const std::vector<float>& ref,
                              double lim, int C = 0, Pick pick = pick_all) {
  if (got.size() != ref.size()) return testing::AssertionFailure() << "size mismatch";
  double num = 0, den = 0;
  size_t nonfinite = 0, n = 0;
  for (size_t i = 0; i < ref.size(); i++) {
    if (!pick(i, C)) continue;
    n++;
    nonfinite += !std::isfinite(got[i]);
    const double d = double(got[i]) - double(ref[i]);
    num += d * d;
    den += double(ref[i]) * double(ref[i]);
  }
  const double rel = std::sqrt(num) / std::max(std::sqrt(den), kScaleFloor * std::sqrt(double(n)));
  if (nonfinite == 0 && rel <= lim) return testing::AssertionSuccess() << "rel " << rel;
  return testing::AssertionFailure() << "relative Frobenius error " << rel << " (limit " << lim
                                     << "), " << nonfinite << " non-finite of " << n;
}

// ---- inputs and the CPU twin -----------------------------------------------------------------
struct Case {
  Shape s;
  int C;
  std::vector<float> qkv, dout, out, lse, dqkv, D;
};
std::vector<float> randn(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = rng.normal();
  return v;
}
Case cpu_case(const Shape& s, uint64_t seed, bool bf16_inputs) {
  Case c{s, s.NH * s.HS, {}, {}, {}, {}, {}, {}};
  c.qkv = randn(size_t(s.B) * s.T * 3 * c.C, seed);
  c.dout = randn(size_t(s.B) * s.T * c.C, seed + 1);
  if (bf16_inputs) {
    c.qkv = round_bf16(c.qkv);
    c.dout = round_bf16(c.dout);
  }
  c.out.resize(size_t(s.B) * s.T * c.C);
  c.lse.resize(size_t(s.B) * s.NH * s.T);
  cpu_flash_attention_forward(c.out.data(), c.lse.data(), c.qkv.data(), s.B, s.T, c.C, s.NH);
  if (bf16_inputs) c.out = round_bf16(c.out);  // what the kernels' backward gets
  c.dqkv.resize(c.qkv.size());
  cpu_flash_attention_backward(c.dqkv.data(), c.dout.data(), c.out.data(), c.qkv.data(),
                               c.lse.data(), s.B, s.T, c.C, s.NH);
  // D = rowsum(dO o O) per (b, h, t), in double.
  c.D.resize(c.lse.size());
  for (int b = 0; b < s.B; b++)
    for (int h = 0; h < s.NH; h++)
      for (int t = 0; t < s.T; t++) {
        double a = 0;
        const size_t off = (size_t(b) * s.T + t) * c.C + size_t(h) * s.HS;
        for (int d = 0; d < s.HS; d++) a += double(c.dout[off + d]) * c.out[off + d];
        c.D[(size_t(b) * s.NH + h) * s.T + t] = float(a);
      }
  return c;
}

// ---- the kernels on the emulator, launched as kernels/flash_attention.cu's launchers do --------
struct EmuResult {
  std::vector<float> out, lse, D, dqkv;  // out/dqkv converted from bf16 in bf16 mode
};

// Forward on c.qkv; backward on (c.qkv, c.dout, c.out, c.lse), the twin's forward results (as the
// GPU test does), with D from the emulated rowdot kernel. Outputs start as NaN.
template <int HS>
EmuResult emu_run_hs(const Case& c, bool use_bf16) {
  const Shape& s = c.s;
  const int C = c.C, T = s.T, NH = s.NH;
  const dim3 grid(unsigned(s.B * NH), unsigned(fk::ceil_div(T, fk::kBr)));
  const dim3 rowdot_grid(unsigned(fk::ceil_div((long long)s.B * NH * T, 4)));
  const float sl2 = fk::softmax_scale_log2(HS), scale = fk::softmax_scale(HS);
  EmuResult r;
  r.lse.assign(c.lse.size(), NAN);
  r.D.assign(c.lse.size(), NAN);
  const float* lse_in = c.lse.data();
  if (!use_bf16) {
    r.out.assign(c.out.size(), NAN);
    r.dqkv.assign(c.qkv.size(), NAN);
    cuda_emu::launch(grid, fk::kThreadsF32, fk::fwd_f32_smem<HS>(), [&] {
      fk::flash_fwd_f32_kernel<HS>(r.out.data(), r.lse.data(), c.qkv.data(), T, C, NH, sl2);
    });
    cuda_emu::launch(rowdot_grid, 128, 0, [&] {
      fk::flash_bwd_rowdot_kernel<float>(r.D.data(), c.dout.data(), c.out.data(), s.B, T, C, NH);
    });
    cuda_emu::launch(grid, fk::kThreadsF32, fk::bwd_dkdv_f32_smem<HS>(), [&] {
      fk::flash_bwd_dkdv_f32_kernel<HS>(r.dqkv.data(), c.dout.data(), c.qkv.data(), lse_in,
                                        r.D.data(), T, C, NH, sl2, scale);
    });
    cuda_emu::launch(grid, fk::kThreadsF32, fk::bwd_dq_f32_smem<HS>(), [&] {
      fk::flash_bwd_dq_f32_kernel<HS>(r.dqkv.data(), c.dout.data(), c.qkv.data(), lse_in,
                                      r.D.data(), T, C, NH, sl2, scale);
    });
    return r;
  }
  std::vector<bf16> qkv = to_bf16(c.qkv), dout = to_bf16(c.dout), out_in = to_bf16(c.out);
  const bf16 nan = __ushort_as_bfloat16(0xFFFF);
  std::vector<bf16> out(c.out.size(), nan), dqkv(c.qkv.size(), nan);
  cuda_emu::launch(grid, fk::kThreadsBf16, fk::fwd_bf16_smem<HS>(), [&] {
    fk::flash_fwd_bf16_kernel<HS>(out.data(), r.lse.data(), qkv.data(), T, C, NH, sl2);
  });
  cuda_emu::launch(rowdot_grid, 128, 0, [&] {
    fk::flash_bwd_rowdot_kernel<bf16>(r.D.data(), dout.data(), out_in.data(), s.B, T, C, NH);
  });
  cuda_emu::launch(grid, fk::kThreadsBf16, fk::bwd_dkdv_bf16_smem<HS>(), [&] {
    fk::flash_bwd_dkdv_bf16_kernel<HS>(dqkv.data(), dout.data(), qkv.data(), lse_in, r.D.data(), T,
                                       C, NH, sl2, scale);
  });
  cuda_emu::launch(grid, fk::kThreadsBf16, fk::bwd_dq_bf16_smem<HS>(), [&] {
    fk::flash_bwd_dq_bf16_kernel<HS>(dqkv.data(), dout.data(), qkv.data(), lse_in, r.D.data(), T, C,
                                     NH, sl2, scale);
  });
  r.out = to_float(out);
  r.dqkv = to_float(dqkv);
  return r;
}
EmuResult emu_run(const Case& c, bool use_bf16) {
  switch (c.s.HS) {
    case 32:
      return emu_run_hs<32>(c, use_bf16);
    case 64:
      return emu_run_hs<64>(c, use_bf16);
    case 128:
      return emu_run_hs<128>(c, use_bf16);
  }
  ADD_FAILURE() << "unsupported HS " << c.s.HS;
  return {};
}

// BATON_EMU_DUMP: the raw bits of every output, appended in test order.
void dump(const EmuResult& r) {
  const char* path = std::getenv("BATON_EMU_DUMP");
  if (!path || !*path) return;
  static bool first = true;
  FILE* f = std::fopen(path, first ? "wb" : "ab");
  first = false;
  ASSERT_NE(f, nullptr) << path;
  for (const auto* v : {&r.out, &r.lse, &r.D, &r.dqkv})
    std::fwrite(v->data(), sizeof(float), v->size(), f);
  std::fclose(f);
}

const char* kPart[3] = {"dq", "dk", "dv"};
const Pick kPickPart[3] = {pick_part<0>, pick_part<1>, pick_part<2>};

TEST(FlashAttentionEmulated, Fp32MatchesCpuTwin) {
  uint64_t seed = 1000;
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(name(s));
    const Case c = cpu_case(s, seed += 10, false);
    const EmuResult e = emu_run(c, false);
    dump(e);
    EXPECT_TRUE(close_fp32(e.out, c.out)) << "out";
    EXPECT_TRUE(close_fp32(e.lse, c.lse)) << "lse";
    EXPECT_TRUE(close_fp32(e.D, c.D)) << "D";
    for (int p = 0; p < 3; p++)
      EXPECT_TRUE(close_fp32(e.dqkv, c.dqkv, c.C, kPickPart[p])) << kPart[p];
  }
}

TEST(FlashAttentionEmulated, Bf16MatchesCpuTwinOnRoundedInputs) {
  const long long mma_before = cuda_emu::g_mma_lane_count.load();
  uint64_t seed = 2000;
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(name(s));
    const Case c = cpu_case(s, seed += 10, true);
    const EmuResult e = emu_run(c, true);
    dump(e);
    EXPECT_TRUE(frob(e.out, c.out, kBf16Frob)) << "out";
    EXPECT_TRUE(frob(e.lse, c.lse, kBf16LseFrob)) << "lse";
    EXPECT_TRUE(close_fp32(e.D, c.D)) << "D (fp32 sum of bf16 products)";
    for (int p = 0; p < 3; p++)
      EXPECT_TRUE(frob(e.dqkv, c.dqkv, kBf16Frob, c.C, kPickPart[p])) << kPart[p];
  }
  EXPECT_GT(cuda_emu::g_mma_lane_count.load(), mma_before) << "the bf16 kernels ran no mma";
}

// Negative control: with A rows g and g+8 swapped in the emulated mma, every bf16 product is
// wrong, and the comparisons above must say so (a test that cannot fail proves nothing).
TEST(FlashAttentionEmulated, WrongMmaFragmentLayoutIsCaught) {
  const Shape s{1, 64, 1, 32};
  const Case c = cpu_case(s, 3000, true);
  EmuResult e;
  {
    cuda_emu::ScopedMmaFault fault(cuda_emu::MmaFault::kSwapARowHalves);
    e = emu_run(c, true);
  }
  EXPECT_FALSE(frob(e.out, c.out, kBf16Frob)) << "out";
  EXPECT_FALSE(frob(e.lse, c.lse, kBf16LseFrob)) << "lse";
  for (int p = 0; p < 3; p++)
    EXPECT_FALSE(frob(e.dqkv, c.dqkv, kBf16Frob, c.C, kPickPart[p])) << kPart[p];
  // The same case without the fault passes.
  const EmuResult good = emu_run(c, true);
  EXPECT_TRUE(frob(good.out, c.out, kBf16Frob)) << "out";
  for (int p = 0; p < 3; p++)
    EXPECT_TRUE(frob(good.dqkv, c.dqkv, kBf16Frob, c.C, kPickPart[p])) << kPart[p];
}

// The emulator reports misuse instead of computing garbage.
TEST(FlashAttentionEmulated, EmulatorRefusesPartialMasksAndSmemOverruns) {
  EXPECT_THROW(
      cuda_emu::launch(dim3(1), 32, 0, [] { (void)cuda_emu::shfl_xor_sync(0x0000ffffu, 1.0f, 1); }),
      std::runtime_error);
  EXPECT_THROW(cuda_emu::launch(dim3(1), 32, 64,
                                [] { cuda_emu::dynamic_smem<float>()[16 + threadIdx.x] = 0.0f; }),
               std::runtime_error);
  // Threads that return early do not hold up the others' barriers.
  int sum = 0;
  cuda_emu::launch(dim3(2), 64, 64 * sizeof(int), [&] {
    int* sh = cuda_emu::dynamic_smem<int>();
    if (threadIdx.x >= 48) return;
    sh[threadIdx.x] = int(threadIdx.x);
    cuda_emu::syncthreads();
    if (threadIdx.x == 0)
      for (int i = 0; i < 48; i++) sum += sh[i];
  });
  EXPECT_EQ(sum, 2 * (47 * 48 / 2));
}

}  // namespace
}  // namespace baton
