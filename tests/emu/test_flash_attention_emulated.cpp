// The flash-attention kernels (kernels/flash_attention.cu) run on the CPU emulator (cuda_emu.h)
// against their CPU twin (src/backend/cpu/cpu_flash_attention.h): forward out and lse, the rowdot
// D, backward dq/dk/dv, fp32 and bf16 kernels, T = 1, T below, at, just under and just over the
// 64-row tile, several tiles with a partial last one, HS 32/64/128, B * NH up to 6. This is the
// CPU-side test of the kernels' indexing, masking, tiling, barriers, cp.async pipelining, ldmatrix
// address patterns and mma fragment layouts; tests/gpu/test_flash_attention.cpp tests them on a
// device. The kernel source is turned into host C++ at build time (gen_host_kernels.py ->
// flash_attention_host.inc), so this always tests the current kernels.
//
// Tolerances (the reasoning of tests/gpu/test_flash_attention.cpp):
//   fp32 kernels, elementwise |emu - cpu| <= 1e-5 (|cpu| + max|cpu|): the same algorithm, tiles
//     and summation order as the twin; only D = rowsum(dO o O) is summed in another order (here
//     the kernels use the host's libm and no FMA contraction, so most elements match to the bit).
//   bf16 kernels, relative Frobenius error <= 1e-2 per tensor (out, dq, dk, dv), the twin run on
//     the bf16-rounded inputs: the kernels round P and dS to bf16 (8-bit mantissa, 2^-9
//     relative) before their products and round the outputs. Measured over kShapes (the test
//     prints them): out 2.1e-3, dq 2.5e-3, dk 2.5e-3, dv 2.4e-3 at most, so 1e-2 (as on the GPU)
//     is 4-5x that. lse (fp32: S is exact products of bf16, which the emulated mma sums in double
//     and rounds once; exp2f/log2f of the host's libm): 5.2e-8 measured, limit 2e-7 here (the GPU
//     test allows 1e-3 for the hardware's fp32 mma order and exp2f).
// Outputs start as NaN and shared memory as NaN, so an element never written or computed from
// unwritten shared memory fails; cp.async destinations read NaN until the copy is waited for.
// Negative controls (a test that cannot fail proves nothing), each on the real kernels: the
// emulated mma with A rows g and g+8 swapped, ldmatrix ignoring .trans, and the cp.async pipeline
// waiting for one group too few must each fail the bf16 comparison; plus the emulator's own
// models: ldmatrix fragments against scalar loads of the PTX ISA layout and, through the
// kernel's own address helpers and the emulated mma, against a scalar matrix product; the bank
// conflict counter (0 for the kernels' padded tiles, 7 extra wavefronts per 8x8 matrix of an
// unpadded 128-byte-stride tile); a read before cp.async.wait_group sees the poison, and copies
// never waited for fail the launch.
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
// T = 1 (also with B, NH > 1), below one tile with two heads, just under and exactly one tile,
// just over one tile with B * NH = 6, three tiles with a partial last one, two batches of HS 128
// with a partial second tile, just over two tiles at HS 128, four tiles at HS 32 with B = 3.
const std::vector<Shape> kShapes = {{1, 1, 1, 64},   {2, 1, 2, 32},   {1, 37, 2, 32},
                                    {1, 63, 1, 64},  {1, 64, 1, 32},  {2, 65, 3, 64},
                                    {1, 130, 1, 64}, {2, 70, 1, 128}, {1, 129, 2, 128},
                                    {3, 200, 1, 32}};

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
constexpr double kFp32Tol = 1e-5, kBf16Frob = 1e-2, kBf16LseFrob = 2e-7;

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
                              double lim, int C = 0, Pick pick = pick_all,
                              double* measured = nullptr) {
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
  if (measured) *measured = std::max(*measured, nonfinite ? double(INFINITY) : rel);
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
  // The dQ partial sums, NaN: a slot the backward kernel leaves unwritten poisons dq.
  std::vector<float> dq_part(fk::dq_partial_floats(s.B, T, NH, HS), NAN);
  cuda_emu::launch(grid, fk::kThreadsBf16, fk::fwd_bf16_smem<HS>(), [&] {
    fk::flash_fwd_bf16_kernel<HS>(out.data(), r.lse.data(), qkv.data(), T, C, NH, sl2);
  });
  cuda_emu::launch(rowdot_grid, 128, 0, [&] {
    fk::flash_bwd_rowdot_kernel<bf16>(r.D.data(), dout.data(), out_in.data(), s.B, T, C, NH);
  });
  cuda_emu::launch(grid, fk::kThreadsBf16, fk::bwd_bf16_smem<HS>(), [&] {
    fk::flash_bwd_bf16_kernel<HS>(dqkv.data(), dq_part.data(), dout.data(), qkv.data(), lse_in,
                                  r.D.data(), T, C, NH, sl2, scale);
  });
  const long long n4 = (long long)s.B * NH * T * (HS / 4);
  cuda_emu::launch(dim3(unsigned(fk::ceil_div(n4, 256))), 256, 0, [&] {
    fk::flash_bwd_dq_reduce_kernel<HS>(dqkv.data(), dq_part.data(), s.B, T, C, NH,
                                       fk::ceil_div(T, fk::kBr), scale);
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
  const long long ldsm_before = cuda_emu::g_ldmatrix_matrices.load();
  const long long conflicts_before = cuda_emu::g_ldmatrix_conflict_wavefronts.load();
  const long long cp_before = cuda_emu::g_cp_async_count.load();
  double worst[6] = {0, 0, 0, 0, 0, 0};  // out, lse, dq, dk, dv, D (elementwise not measured)
  uint64_t seed = 2000;
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(name(s));
    const Case c = cpu_case(s, seed += 10, true);
    const EmuResult e = emu_run(c, true);
    dump(e);
    EXPECT_TRUE(frob(e.out, c.out, kBf16Frob, 0, pick_all, &worst[0])) << "out";
    EXPECT_TRUE(frob(e.lse, c.lse, kBf16LseFrob, 0, pick_all, &worst[1])) << "lse";
    EXPECT_TRUE(close_fp32(e.D, c.D)) << "D (fp32 sum of bf16 products)";
    for (int p = 0; p < 3; p++)
      EXPECT_TRUE(frob(e.dqkv, c.dqkv, kBf16Frob, c.C, kPickPart[p], &worst[2 + p])) << kPart[p];
  }
  std::printf("measured relative Frobenius errors (max over the shapes): out %.2g lse %.2g dq %.2g "
              "dk %.2g dv %.2g\n",
              worst[0], worst[1], worst[2], worst[3], worst[4]);
  EXPECT_GT(cuda_emu::g_mma_lane_count.load(), mma_before) << "the bf16 kernels ran no mma";
  EXPECT_GT(cuda_emu::g_ldmatrix_matrices.load(), ldsm_before) << "no ldmatrix";
  EXPECT_GT(cuda_emu::g_cp_async_count.load(), cp_before) << "no cp.async";
  // Padded tiles (kernels/flash_attention.cu, "Shared-memory layout"): no ldmatrix phase of the
  // forward, the backward's five products or dS^T has a bank conflict.
  EXPECT_EQ(cuda_emu::g_ldmatrix_conflict_wavefronts.load(), conflicts_before)
      << "ldmatrix bank conflicts in the bf16 kernels";
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

// Negative control: ldmatrix.trans loading as without .trans. Every transposed operand is wrong:
// V in P V (out), dO in P^T dO (dv), Q in dS^T Q (dk), dS^T and K in dS K (dq); lse (Q K^T
// without .trans) stays right.
TEST(FlashAttentionEmulated, LdmatrixIgnoringTransIsCaught) {
  const Case c = cpu_case({1, 100, 1, 64}, 3100, true);
  EmuResult e;
  {
    cuda_emu::ScopedFault<cuda_emu::LdmatrixFault> fault(cuda_emu::g_ldmatrix_fault,
                                                         cuda_emu::LdmatrixFault::kIgnoreTrans);
    e = emu_run(c, true);
  }
  EXPECT_FALSE(frob(e.out, c.out, kBf16Frob)) << "out";
  EXPECT_TRUE(frob(e.lse, c.lse, kBf16LseFrob)) << "lse";
  for (int p = 0; p < 3; p++)
    EXPECT_FALSE(frob(e.dqkv, c.dqkv, kBf16Frob, c.C, kPickPart[p])) << kPart[p];
}

// Negative control: a cp.async pipeline that waits for one group too few (cp.async.wait_group N,
// N > 0, leaving N + 1 groups pending) computes on tiles still in flight: poisoned (NaN) shared
// memory reaches every output of the forward and of the backward's CTAs with a next tile.
TEST(FlashAttentionEmulated, CpAsyncWaitingOneGroupTooFewIsCaught) {
  const Case c = cpu_case({1, 130, 1, 32}, 3200, true);
  EmuResult e;
  {
    cuda_emu::ScopedFault<cuda_emu::CpAsyncFault> fault(cuda_emu::g_cp_async_fault,
                                                        cuda_emu::CpAsyncFault::kWaitOneGroupShort);
    e = emu_run(c, true);
  }
  EXPECT_FALSE(frob(e.out, c.out, kBf16Frob)) << "out";
  EXPECT_FALSE(frob(e.lse, c.lse, kBf16LseFrob)) << "lse";
  for (int p = 0; p < 3; p++)
    EXPECT_FALSE(frob(e.dqkv, c.dqkv, kBf16Frob, c.C, kPickPart[p])) << kPart[p];
}

// ---- the emulator's ldmatrix and cp.async models ----------------------------------------------

// The raw bits of a bf16 register half.
uint16_t half_bits(uint32_t reg, int hi) { return uint16_t(hi ? reg >> 16 : reg & 0xffffu); }

// ldmatrix against scalar loads, with the fragment layout of the PTX ISA ("Warp-level matrix load
// instruction: ldmatrix"; written here from the ISA, not from cuda_emu.h): matrix q's row r at the
// address lane 8q + r supplies; lane (g = lane/4, t = lane%4) gets M_q[g][2t], M_q[g][2t+1]
// (low, high half) without .trans and M_q[2t][g], M_q[2t+1][g] with it. Every .num and .trans on
// a 16 x 40 tile (stride 80 bytes) of distinct bit patterns, matrix q at rows 8(q&1), columns 8q.
template <int Num, bool Trans>
void check_ldmatrix_layout() {
  SCOPED_TRACE("x" + std::to_string(Num) + (Trans ? ".trans" : ""));
  constexpr int LD = 40;
  std::vector<std::array<uint32_t, Num>> got(32);
  std::vector<uint16_t> tile(16 * LD);
  for (int k = 0; k < 16 * LD; k++) tile[k] = uint16_t(0x1000 + 7 * k);  // distinct patterns
  cuda_emu::launch(dim3(1), 32, tile.size() * 2, [&] {
    auto* sm = cuda_emu::dynamic_smem<uint16_t>();
    for (int k = int(threadIdx.x); k < 16 * LD; k += 32) sm[k] = tile[k];
    cuda_emu::syncthreads();
    const int l = int(threadIdx.x), q = (l / 8) % Num, r = l % 8;
    const uint32_t addr =
        uint32_t(cuda_emu::cvta_generic_to_shared(sm + (8 * (q & 1) + r) * LD + 8 * q));
    got[l] = cuda_emu::ldmatrix_m8n8_b16<Num, Trans>(addr);
  });
  auto M = [&](int q, int row, int col) { return tile[(8 * (q & 1) + row) * LD + 8 * q + col]; };
  for (int l = 0; l < 32; l++)
    for (int q = 0; q < Num; q++) {
      const int g = l / 4, t = l % 4;
      const uint16_t lo = Trans ? M(q, 2 * t, g) : M(q, g, 2 * t);
      const uint16_t hi = Trans ? M(q, 2 * t + 1, g) : M(q, g, 2 * t + 1);
      EXPECT_EQ(half_bits(got[l][q], 0), lo) << "lane " << l << " matrix " << q;
      EXPECT_EQ(half_bits(got[l][q], 1), hi) << "lane " << l << " matrix " << q;
    }
}

TEST(FlashAttentionEmulated, LdmatrixFragmentsMatchScalarLoads) {
  check_ldmatrix_layout<1, false>();
  check_ldmatrix_layout<2, false>();
  check_ldmatrix_layout<4, false>();
  check_ldmatrix_layout<1, true>();
  check_ldmatrix_layout<2, true>();
  check_ldmatrix_layout<4, true>();
}

// The kernel's own ldmatrix address helpers (patterns X and Y of kernels/flash_attention.cu) and
// the emulated mma against a scalar matrix product C = A B (A 16x16, B 16x16 = two n-tiles):
// A from a row-major [m][k] tile (lds_a) and from a [k][m] tile (lds_a_t, .trans), B from an
// [n][k] tile (lds_b2) and from a [k][n] tile (lds_b2_t, .trans), all four combinations, in the
// kernels' padded layout (row stride 24 bf16). The products of bf16 are exact and the emulated mma
// rounds the sum once to fp32: |err| <= 2^-23 sum |a||b|.
TEST(FlashAttentionEmulated, LdmatrixHelpersFeedTheMmaTheRightOperands) {
  constexpr int LD = 24;
  const std::vector<float> a = round_bf16(randn(256, 41)), bm = round_bf16(randn(256, 42));
  auto A = [&](int m, int k) { return a[m * 16 + k]; };
  auto B = [&](int k, int n) { return bm[k * 16 + n]; };
  std::vector<bf16> tiles(4 * 16 * LD);  // A [m][k], A^T [k][m], B^T [n][k], B [k][n]
  for (int r = 0; r < 16; r++)
    for (int c = 0; c < 16; c++) {
      tiles[0 * 16 * LD + r * LD + c] = __float2bfloat16_rn(A(r, c));
      tiles[1 * 16 * LD + r * LD + c] = __float2bfloat16_rn(A(c, r));
      tiles[2 * 16 * LD + r * LD + c] = __float2bfloat16_rn(B(c, r));
      tiles[3 * 16 * LD + r * LD + c] = __float2bfloat16_rn(B(r, c));
    }
  std::vector<std::array<float, 8>> got[4];  // combination -> lane -> C fragments of both n-tiles
  for (auto& v : got) v.resize(32);
  cuda_emu::launch(dim3(1), 32, tiles.size() * sizeof(bf16), [&] {
    bf16* sm = cuda_emu::dynamic_smem<bf16>();
    for (size_t k = threadIdx.x; k < tiles.size(); k += 32) sm[k] = tiles[k];
    cuda_emu::syncthreads();
    const uint32_t base = uint32_t(cuda_emu::cvta_generic_to_shared(sm));
    const uint32_t sA = base, sAt = base + 2 * 16 * LD, sBn = base + 4 * 16 * LD,
                   sBk = base + 6 * 16 * LD;
    const int lane = int(threadIdx.x);
    for (int combo = 0; combo < 4; combo++) {
      uint32_t af[4], bf[4];
      if (combo & 1)
        fk::lds_a_t(af, sAt, LD, 0, 0, lane);
      else
        fk::lds_a(af, sA, LD, 0, 0, lane);
      if (combo & 2)
        fk::lds_b2_t(bf, sBk, LD, 0, 0, lane);
      else
        fk::lds_b2(bf, sBn, LD, 0, 0, lane);
      float c0[4] = {0, 0, 0, 0}, c1[4] = {0, 0, 0, 0};
      fk::mma_bf16(c0, af, bf[0], bf[1]);
      fk::mma_bf16(c1, af, bf[2], bf[3]);
      for (int e = 0; e < 4; e++) {
        got[combo][lane][e] = c0[e];
        got[combo][lane][4 + e] = c1[e];
      }
    }
  });
  for (int combo = 0; combo < 4; combo++) {
    SCOPED_TRACE(std::string(combo & 1 ? "lds_a_t" : "lds_a") + " x " +
                 (combo & 2 ? "lds_b2_t" : "lds_b2"));
    for (int lane = 0; lane < 32; lane++)
      for (int e = 0; e < 8; e++) {
        const int g = lane / 4, t = lane % 4, row = g + ((e & 3) >= 2 ? 8 : 0),
                  col = (e >= 4 ? 8 : 0) + 2 * t + (e & 1);
        double want = 0, mag = 0;
        for (int k = 0; k < 16; k++) {
          want += double(A(row, k)) * B(k, col);
          mag += std::fabs(double(A(row, k)) * B(k, col));
        }
        EXPECT_NEAR(got[combo][lane][e], want, mag * 0x1p-23 + 1e-30)
            << "C[" << row << "][" << col << "] lane " << lane;
      }
  }
}

// The bank-conflict count of ldmatrix phases: the kernels' padded stride (D + 8 bf16, here 72:
// rows 36 words apart) is conflict-free, a 128-byte stride puts the 8 rows of every matrix on the
// same 4 banks (8 wavefronts: 7 extra per matrix, 28 per .x4), and 32 lanes reading one row
// are a broadcast (no conflict).
TEST(FlashAttentionEmulated, LdmatrixBankConflictsAreCounted) {
  auto extra_wavefronts = [](int ld, bool same_row) {
    const long long before = cuda_emu::g_ldmatrix_conflict_wavefronts.load();
    cuda_emu::launch(dim3(1), 32, 16 * ld * sizeof(bf16), [&] {
      bf16* sm = cuda_emu::dynamic_smem<bf16>();
      for (int k = int(threadIdx.x); k < 16 * ld; k += 32) sm[k] = __float2bfloat16_rn(1.0f);
      cuda_emu::syncthreads();
      const uint32_t base = uint32_t(cuda_emu::cvta_generic_to_shared(sm));
      uint32_t r[4];
      if (same_row)
        (void)cuda_emu::ldmatrix_m8n8_b16<4, false>(base);
      else
        fk::lds_a(r, base, ld, 0, 0, int(threadIdx.x));
    });
    return cuda_emu::g_ldmatrix_conflict_wavefronts.load() - before;
  };
  EXPECT_EQ(extra_wavefronts(72, false), 0);  // kernels' layout at D = 64
  EXPECT_EQ(extra_wavefronts(40, false), 0);  // D = 32
  EXPECT_EQ(extra_wavefronts(64, false), 28);
  EXPECT_EQ(extra_wavefronts(64, true), 0);
}

// cp.async: the destination reads as poison (NaN) from the issue until this thread's wait_group
// covers the copy (other threads see it after a barrier following that wait), not the old
// contents nor the new; src-size zero-fills the rest; copies never waited for fail the launch.
TEST(FlashAttentionEmulated, CpAsyncCompletesOnlyAtTheWait) {
  std::vector<float> src(64), before(64), after(64);
  for (int k = 0; k < 64; k++) src[k] = float(k + 1);
  cuda_emu::launch(dim3(1), 32, 64 * sizeof(float), [&] {
    float* sm = cuda_emu::dynamic_smem<float>();
    const int t = int(threadIdx.x);
    sm[2 * t] = sm[2 * t + 1] = -1.0f;  // old contents
    cuda_emu::syncthreads();
    // Threads 0..15 copy the 16-byte chunk t (thread 15 only 8 bytes of it: zero fill); the
    // others commit an empty group.
    if (t < 16)
      cuda_emu::cp_async_cg(uint32_t(cuda_emu::cvta_generic_to_shared(sm + 4 * t)),
                            src.data() + 4 * t, 16, t == 15 ? 8 : 16);
    cuda_emu::cp_async_commit_group();
    cuda_emu::syncthreads();
    before[2 * t] = sm[(2 * t + 33) % 64];  // another thread's chunk
    before[2 * t + 1] = sm[(2 * t + 34) % 64];
    cuda_emu::syncthreads();  // every read above happens before any thread's wait
    cuda_emu::cp_async_wait_group(0);
    cuda_emu::syncthreads();
    after[2 * t] = sm[2 * t];
    after[2 * t + 1] = sm[2 * t + 1];
  });
  for (int k = 0; k < 64; k++) EXPECT_TRUE(std::isnan(before[k])) << k << ": " << before[k];
  for (int k = 0; k < 64; k++) EXPECT_EQ(after[k], k >= 62 ? 0.0f : src[k]) << k;
  // A thread that never waits for its copies.
  EXPECT_THROW(cuda_emu::launch(dim3(1), 32, 512,
                                [&] {
                                  float* sm = cuda_emu::dynamic_smem<float>();
                                  cuda_emu::cp_async_cg(
                                      uint32_t(cuda_emu::cvta_generic_to_shared(sm + 4 * threadIdx.x)),
                                      src.data(), 16);
                                  cuda_emu::cp_async_commit_group();
                                }),
               std::runtime_error);
  // Copies outside shared memory (64 bytes of it), misaligned, or of a size .cg does not have:
  // one copy of `bytes` to the float at `at`, waited for.
  const auto copy_to = [&](int at, int bytes) {
    cuda_emu::launch(dim3(1), 32, 64, [&] {
      cuda_emu::cp_async_cg(uint32_t(cuda_emu::cvta_generic_to_shared(cuda_emu::dynamic_smem<float>() + at)),
                            src.data(), bytes);
      cuda_emu::cp_async_wait_all();
    });
  };
  EXPECT_THROW(copy_to(16, 16), std::runtime_error);
  EXPECT_THROW(copy_to(1, 16), std::runtime_error);
  EXPECT_THROW(copy_to(0, 8), std::runtime_error);
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
