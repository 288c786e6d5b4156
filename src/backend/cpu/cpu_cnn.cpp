// oneDNN-backed CNN ops; see cpu_cnn.h. Plain formats (nchw activations, oihw weights) at every
// op's boundary, so layers and pipeline messages see ordinary NCHW tensors.
#include "backend/cpu/cpu_cnn.h"

#include <array>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <oneapi/dnnl/dnnl.hpp>
#include <vector>

#include "backend/cpu/cpu_batchnorm.h"
#include "core/error.h"

namespace baton {

namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

memory::desc md(const memory::dims& dims, tag t, dt type = dt::f32) { return memory::desc(dims, type, t); }

// A float buffer the entry owns (weight gradients before they are accumulated).
struct Scratch {
  std::vector<float> v;
  float* get(size_t n) {
    if (v.size() < n) v.resize(n);
    return v.data();
  }
};

void add_into(float* dst, const float* src, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= 32768)
  for (size_t i = 0; i < n; ++i) dst[i] += src[i];
}

template <typename F>
void guarded(const char* op, F&& f) {
  try {
    f();
  } catch (const dnnl::error& e) {
    throw Error(fmt::format("oneDNN {} failed: {}", op, e.what()),
                "this is a bug or an unsupported shape; report the shape from the error above");
  }
}

// A primitive with its argument map, built once: the map's memory objects share their handles
// with the entry's, so binding new buffers (set_data_handle) rebinds the map.
struct Prim {
  dnnl::primitive p;
  std::unordered_map<int, memory> args;
};

// An argument of a primitive in the layout the primitive prefers (format_tag::any: for weights,
// oneDNN's blocked layouts): the caller's plain buffer, and, when the primitive wants another
// layout, a region of the shared staging arena with the reorders between the two.
struct Staged {
  memory user;   // plain layout, rebound to the caller's buffer each call
  memory inner;  // what the primitive reads or writes (== user when the layouts agree)
  size_t offset = 0, bytes = 0;  // inner's region of the staging arena (bytes 0: not staged)
  dnnl::reorder to_inner, to_user;
};

struct ConvEntry {
  Prim fwd, bwd_data, bwd_w;  // with a bias argument always (zeros when the layer has none)
  Staged x_f, w_f, y_f;       // forward's arguments
  Staged dy_d, w_d, dx_d;     // backward data's
  Staged x_w, dy_w, dw_w;     // backward weights'
  memory b, db;               // [K], plain
  std::vector<float> zero_bias;
  Scratch dw_tmp, db_tmp;
  size_t stage_bytes = 0;  // the staging arena this entry needs (the largest of its three calls)
  std::string impl;        // oneDNN's name of the forward kernel (e.g. "jit_wino_4x3:avx512_core")
};

// Which convolutions run as Winograd F(4×4, 3×3) (oneDNN's jit_wino_4x3: AVX-512 only, fp32,
// blocked activations reordered from and to NHWC around each call), from BATON_CPU_CONV:
//   "auto" (unset or empty) — the 3×3 stride-1 convolutions with 32 or more input and output
//     channels. Measured in place (tests/bench/conv_algorithms.cpp, docs/benchmarks.md
//     "Convolutions"; 2-core AVX-512 VM, reorders included): 1.2–2.2× the direct NHWC kernels'
//     speed from 32 channels at 4–56 px (within noise at 512 channels, 7 px); at 16 channels
//     0.7–0.85×, its input and output transforms (which grow with C + K) not repaid by the
//     products (which grow with C·K).
//   "winograd" — every 3×3 stride-1 convolution oneDNN's kernel takes (channels in multiples of 16).
//   "direct" — none, and every convolution on NHWC descriptors (the bits before session 19).
// Winograd's sums differ from direct's in rounding only (about 1e-6 relative in fp32,
// tests/unit/test_cnn_ops.cpp). Where oneDNN has no Winograd kernel, the direct one runs.
enum class ConvChoice { AUTO, WINOGRAD, DIRECT };

ConvChoice conv_choice_from_env() {
  const char* knob = std::getenv("BATON_CPU_CONV");
  const std::string_view v = knob ? knob : "";
  if (v.empty() || v == "auto") return ConvChoice::AUTO;
  if (v == "winograd") return ConvChoice::WINOGRAD;
  if (v == "direct") return ConvChoice::DIRECT;
  throw Error(fmt::format("BATON_CPU_CONV = \"{}\" is not a CPU convolution choice", v),
              "use \"auto\" (the default: Winograd for 3×3 stride-1 convolutions of 32+ channels), "
              "\"winograd\" (wherever oneDNN takes it) or \"direct\"");
}

bool try_winograd(ConvChoice choice, const Conv2d& c) {
  if (choice == ConvChoice::DIRECT || c.R != 3 || c.S != 3 || c.stride != 1 || c.pad != 1) return false;
  return choice == ConvChoice::WINOGRAD || (c.C >= 32 && c.K >= 32);
}

using Fwd = dnnl::convolution_forward;
using BwdD = dnnl::convolution_backward_data;
using BwdW = dnnl::convolution_backward_weights;

// A convolution's three primitive descriptors (forward, backward data, backward weights) for one
// algorithm and one set of argument descriptors; throws dnnl::error where oneDNN has no kernel.
struct ConvPds {
  Fwd::primitive_desc fwd;
  BwdD::primitive_desc data;
  BwdW::primitive_desc weights;
  bool any_reference() const {  // one of them on oneDNN's reference kernels
    for (const char* impl : {fwd.impl_info_str(), data.impl_info_str(), weights.impl_info_str()})
      if (std::string_view(impl).find("ref") != std::string_view::npos) return true;
    return false;
  }
};

ConvPds conv_pds(const Conv2d& c, dnnl::algorithm alg, const memory::desc& x, const memory::desc& w,
                 const memory::desc& dw, const memory::desc& b, const memory::desc& y, const dnnl::primitive_attr& attr,
                 const dnnl::engine& eng) {
  const memory::dims st{c.stride, c.stride}, pd{c.pad, c.pad};
  const Fwd::primitive_desc f(Fwd::desc(dnnl::prop_kind::forward_training, alg, x, w, b, y, st, pd, pd), attr, eng);
  return ConvPds{f, BwdD::primitive_desc(BwdD::desc(alg, x, w, y, st, pd, pd), attr, eng, f),
                 BwdW::primitive_desc(BwdW::desc(alg, x, dw, b, y, st, pd, pd), attr, eng, f)};
}

// NHWC with 16 channels is nChw16c byte for byte, and with 1 channel NCHW: described so, an fp32
// convolution from 1 or 16 channels to 16 runs oneDNN's blocked direct kernels on the caller's
// buffers as they are — its forward about 20% faster than the NHWC kernel's at the fashion
// ResNet's 28 px (docs/benchmarks.md "Convolutions"). Only where oneDNN has blocked kernels for
// all three passes (AVX-512): elsewhere (AVX2's blocks are 8 wide) it would run its reference
// kernels, 200× slower — Impl::conv probes, and any "ref" kernel keeps the shape NHWC.
bool nhwc_is_blocked(const Conv2d& c) { return (c.C == 1 || c.C == 16) && c.K == 16; }

struct PoolEntry {
  Prim fwd, bwd;
  memory x, y, ws, dx, dy;
  size_t ws_bytes = 0;
};

}  // namespace

struct CpuCnn::Impl {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  dnnl::primitive_attr attr;  // user scratchpad: no allocation inside primitives
  void* scratch = nullptr;
  size_t scratch_bytes = 0;
  std::map<std::array<int, 10>, ConvEntry> convs;  // shape and bf16 (0 / 1)
  CpuBatchNorm bn;  // ours, not oneDNN's: sums in double (cpu_batchnorm.h)
  std::map<std::array<int, 9>, PoolEntry> pools;
  const ConvChoice conv_choice = conv_choice_from_env();

  Impl() { attr.set_scratchpad_mode(dnnl::scratchpad_mode::user); }
  ~Impl() {
    std::free(scratch);
    std::free(staging);
  }

  std::vector<memory> scratch_mems;  // every primitive's view of the shared scratchpad

  // A primitive of `pd` with `args` and a view of the shared scratchpad (grown to its need).
  template <typename P, typename PD>
  Prim make(const PD& pd, std::unordered_map<int, memory> args) {
    const memory::desc d = pd.scratchpad_desc();
    const size_t need = d.get_size();
    if (need > scratch_bytes) {
      std::free(scratch);
      scratch_bytes = (need + 4095) / 4096 * 4096;
      scratch = std::aligned_alloc(4096, scratch_bytes);
      BATON_REQUIRE(scratch, fmt::format("out of memory for a {} byte oneDNN scratchpad", scratch_bytes),
                    "use a smaller micro-batch");
    }
    memory sp(d, eng, scratch);
    scratch_mems.push_back(sp);
    args.insert({DNNL_ARG_SCRATCHPAD, sp});
    return Prim{P(pd), std::move(args)};
  }
  void run(Prim& p) {
    // The scratchpad may have grown (and moved) since this primitive was built.
    p.args.at(DNNL_ARG_SCRATCHPAD).set_data_handle(scratch);
    p.p.execute(strm, p.args);
    strm.wait();
  }

  // `user` plain, `want` the primitive's: staged at `offset` of the arena when they differ.
  Staged stage(const memory::desc& user, const memory::desc& want, size_t& offset) {
    Staged s;
    s.user = memory(user, eng, nullptr);
    if (want == user) {
      s.inner = s.user;
      return s;
    }
    s.inner = memory(want, eng, nullptr);
    s.offset = offset;
    s.bytes = (want.get_size() + 4095) / 4096 * 4096;
    offset += s.bytes;
    s.to_inner = dnnl::reorder(s.user, s.inner);
    s.to_user = dnnl::reorder(s.inner, s.user);
    return s;
  }

  // bf16: activations and weights bf16 (native bf16, fp32 accumulation); bias and the weight and
  // bias gradients fp32 either way.
  ConvEntry& conv(const Conv2d& c, bool bf16) {
    const std::array<int, 10> key{c.N, c.C, c.H, c.W, c.K, c.R, c.S, c.stride, c.pad, bf16 ? 1 : 0};
    auto it = convs.find(key);
    if (it != convs.end()) return it->second;
    ConvEntry& e = convs[key];
    const memory::dims xs{c.N, c.C, c.H, c.W}, ws{c.K, c.C, c.R, c.S}, bs{c.K}, ys{c.N, c.K, c.P(), c.Q()};
    const dt act = bf16 ? dt::bf16 : dt::f32;
    const auto bm = md(bs, tag::x), wm = md(ws, tag::oihw, act), dwm = md(ws, tag::oihw), wa = md(ws, tag::any, act),
               dwa = md(ws, tag::any);
    auto xm = md(xs, tag::nhwc, act), ym = md(ys, tag::nhwc, act);  // the caller's buffers
    std::optional<ConvPds> pds;
    // 1 or 16 → 16 channels: the caller's NHWC buffers described as blocked (nhwc_is_blocked),
    // where oneDNN's blocked direct kernels take all three passes.
    if (!bf16 && conv_choice != ConvChoice::DIRECT && nhwc_is_blocked(c)) {
      const auto x16 = md(xs, c.C == 16 ? tag::nChw16c : tag::nchw), y16 = md(ys, tag::nChw16c);
      try {
        pds = conv_pds(c, dnnl::algorithm::convolution_direct, x16, wa, dwa, bm, y16, attr, eng);
        if (pds->any_reference())
          pds.reset();
        else
          xm = x16, ym = y16;
      } catch (const dnnl::error&) {
      }
    }
    // Winograd: every argument in its blocked layouts (staged); all three passes, or the direct
    // kernels (a CPU without AVX-512 has none).
    if (!bf16 && try_winograd(conv_choice, c)) {
      try {
        pds = conv_pds(c, dnnl::algorithm::convolution_winograd, md(xs, tag::any), wa, dwa, bm, md(ys, tag::any),
                       attr, eng);
      } catch (const dnnl::error&) {
      }
    }
    // Direct: activations as the caller holds them (its kernels read NHWC), weights in the kernel's layout.
    if (!pds) pds = conv_pds(c, dnnl::algorithm::convolution_direct, xm, wa, dwa, bm, ym, attr, eng);
    const Fwd::primitive_desc& fwd_pd = pds->fwd;
    e.impl = fwd_pd.impl_info_str();
    e.b = memory(bm, eng, nullptr);
    e.db = memory(bm, eng, nullptr);
    e.zero_bias.assign(size_t(c.K), 0.0f);
    size_t off = 0;
    e.x_f = stage(xm, fwd_pd.src_desc(), off);
    e.w_f = stage(wm, fwd_pd.weights_desc(), off);
    e.y_f = stage(ym, fwd_pd.dst_desc(), off);
    e.stage_bytes = off;
    e.fwd = make<Fwd>(fwd_pd, {{DNNL_ARG_SRC, e.x_f.inner}, {DNNL_ARG_WEIGHTS, e.w_f.inner}, {DNNL_ARG_BIAS, e.b},
                               {DNNL_ARG_DST, e.y_f.inner}});
    const BwdD::primitive_desc& bwd_data_pd = pds->data;
    off = 0;
    e.dy_d = stage(ym, bwd_data_pd.diff_dst_desc(), off);
    e.w_d = stage(wm, bwd_data_pd.weights_desc(), off);
    e.dx_d = stage(xm, bwd_data_pd.diff_src_desc(), off);
    e.stage_bytes = std::max(e.stage_bytes, off);
    e.bwd_data = make<BwdD>(bwd_data_pd, {{DNNL_ARG_DIFF_DST, e.dy_d.inner}, {DNNL_ARG_WEIGHTS, e.w_d.inner},
                                          {DNNL_ARG_DIFF_SRC, e.dx_d.inner}});
    const BwdW::primitive_desc& bwd_w_pd = pds->weights;
    off = 0;
    e.x_w = stage(xm, bwd_w_pd.src_desc(), off);
    e.dy_w = stage(ym, bwd_w_pd.diff_dst_desc(), off);
    e.dw_w = stage(dwm, bwd_w_pd.diff_weights_desc(), off);
    e.stage_bytes = std::max(e.stage_bytes, off);
    e.bwd_w = make<BwdW>(bwd_w_pd, {{DNNL_ARG_SRC, e.x_w.inner}, {DNNL_ARG_DIFF_DST, e.dy_w.inner},
                                    {DNNL_ARG_DIFF_WEIGHTS, e.dw_w.inner}, {DNNL_ARG_DIFF_BIAS, e.db}});
    grow_staging(e.stage_bytes);
    return e;
  }

  // The staging arena (grown, only while new shapes appear, to the largest need).
  void* staging = nullptr;
  size_t staging_bytes = 0;
  void grow_staging(size_t need) {
    if (need <= staging_bytes) return;
    std::free(staging);
    staging_bytes = need;
    staging = std::aligned_alloc(4096, staging_bytes);
    BATON_REQUIRE(staging, fmt::format("out of memory for {} bytes of oneDNN staging buffers", staging_bytes),
                  "use a smaller micro-batch");
  }
  // Points `s` at its arena region (and at the caller's `p`); for an input, reorders it in.
  void bind_in(Staged& s, const void* p) {
    s.user.set_data_handle(const_cast<void*>(p));
    if (!s.bytes) return;
    s.inner.set_data_handle(static_cast<char*>(staging) + s.offset);
    s.to_inner.execute(strm, s.user, s.inner);
  }
  void bind_out(Staged& s, void* p) {
    s.user.set_data_handle(p);
    if (s.bytes) s.inner.set_data_handle(static_cast<char*>(staging) + s.offset);
  }
  // After the primitive ran: an output in another layout is reordered into the caller's buffer.
  void finish_out(Staged& s) {
    if (s.bytes) s.to_user.execute(strm, s.inner, s.user);
  }

  PoolEntry& pool(const Pool2d& p) {
    const std::array<int, 9> key{p.N, p.C, p.H, p.W, p.R, p.S, p.stride, p.pad, p.max ? 1 : 0};
    auto it = pools.find(key);
    if (it != pools.end()) return it->second;
    PoolEntry& e = pools[key];
    const auto xm = md({p.N, p.C, p.H, p.W}, tag::nhwc), ym = md({p.N, p.C, p.P(), p.Q()}, tag::nhwc);
    const memory::dims st{p.stride, p.stride}, k{p.R, p.S}, pd{p.pad, p.pad};
    const auto alg = p.max ? dnnl::algorithm::pooling_max : dnnl::algorithm::pooling_avg_include_padding;
    e.x = memory(xm, eng, nullptr);
    e.y = memory(ym, eng, nullptr);
    e.dx = memory(xm, eng, nullptr);
    e.dy = memory(ym, eng, nullptr);
    using Fwd = dnnl::pooling_forward;
    const Fwd::primitive_desc fwd_pd(Fwd::desc(dnnl::prop_kind::forward_training, alg, xm, ym, st, k, pd, pd), attr,
                                     eng);
    e.ws_bytes = fwd_pd.workspace_desc().get_size();
    std::unordered_map<int, memory> fwd_args{{DNNL_ARG_SRC, e.x}, {DNNL_ARG_DST, e.y}};
    std::unordered_map<int, memory> bwd_args{{DNNL_ARG_DIFF_DST, e.dy}, {DNNL_ARG_DIFF_SRC, e.dx}};
    if (e.ws_bytes) {
      e.ws = memory(fwd_pd.workspace_desc(), eng, nullptr);
      fwd_args.insert({DNNL_ARG_WORKSPACE, e.ws});
      bwd_args.insert({DNNL_ARG_WORKSPACE, e.ws});
    }
    e.fwd = make<Fwd>(fwd_pd, std::move(fwd_args));
    using Bwd = dnnl::pooling_backward;
    e.bwd = make<Bwd>(Bwd::primitive_desc(Bwd::desc(alg, xm, ym, st, k, pd, pd), attr, eng, fwd_pd), std::move(bwd_args));
    return e;
  }
};

namespace {
void bind(memory& m, const void* p) { m.set_data_handle(const_cast<void*>(p)); }
}  // namespace

CpuCnn::CpuCnn() : impl_(std::make_unique<Impl>()) {}
CpuCnn::~CpuCnn() = default;

void CpuCnn::conv2d_forward(float* y, const float* x, const float* w, const float* bias, const Conv2d& c) {
  conv_forward(y, x, w, bias, c, false);
}
void CpuCnn::conv2d_forward_bf16(uint16_t* y, const uint16_t* x, const uint16_t* w, const float* bias,
                                 const Conv2d& c) {
  conv_forward(y, x, w, bias, c, true);
}
void CpuCnn::conv2d_backward(float* dx, float* dw, float* db, const float* dy, const float* x, const float* w,
                             const Conv2d& c) {
  conv_backward(dx, dw, db, dy, x, w, c, false);
}
void CpuCnn::conv2d_backward_bf16(uint16_t* dx, float* dw, float* db, const uint16_t* dy, const uint16_t* x,
                                  const uint16_t* w, const Conv2d& c) {
  conv_backward(dx, dw, db, dy, x, w, c, true);
}

std::string CpuCnn::conv2d_kernel(const Conv2d& c, bool bf16) {
  std::string impl;
  guarded("convolution", [&] { impl = impl_->conv(c, bf16).impl; });
  return impl;
}

void CpuCnn::conv_forward(void* y, const void* x, const void* w, const float* bias, const Conv2d& c, bool bf16) {
  guarded("convolution forward", [&] {
    Impl& m = *impl_;
    ConvEntry& e = m.conv(c, bf16);
    m.bind_in(e.x_f, x);
    m.bind_in(e.w_f, w);
    m.bind_out(e.y_f, y);
    bind(e.b, bias ? bias : e.zero_bias.data());
    m.run(e.fwd);
    m.finish_out(e.y_f);
    m.strm.wait();
  });
}

void CpuCnn::conv_backward(void* dx, float* dw, float* db, const void* dy, const void* x, const void* w,
                           const Conv2d& c, bool bf16) {
  guarded("convolution backward", [&] {
    Impl& m = *impl_;
    ConvEntry& e = m.conv(c, bf16);
    if (dx) {
      m.bind_in(e.dy_d, dy);
      m.bind_in(e.w_d, w);
      m.bind_out(e.dx_d, dx);
      m.run(e.bwd_data);
      m.finish_out(e.dx_d);
    }
    if (!dw && !db) {
      m.strm.wait();
      return;
    }
    // oneDNN overwrites its weight gradients: compute them aside, then accumulate.
    const size_t nw = size_t(c.K) * c.C * c.R * c.S;
    float* tw = e.dw_tmp.get(nw);
    m.bind_in(e.x_w, x);
    m.bind_in(e.dy_w, dy);
    m.bind_out(e.dw_w, tw);
    bind(e.db, e.db_tmp.get(size_t(c.K)));
    m.run(e.bwd_w);
    m.finish_out(e.dw_w);
    m.strm.wait();
    if (dw) add_into(dw, tw, nw);
    if (db) add_into(db, e.db_tmp.v.data(), size_t(c.K));
  });
}

void CpuCnn::batchnorm_forward(float* y, float* mean, float* var, const float* x, const float* gamma,
                               const float* beta, int N, int C, int HW, float eps, bool training) {
  guarded("batch normalization forward",
          [&] { impl_->bn.forward(y, mean, var, x, gamma, beta, N, C, HW, eps, training); });
}

void CpuCnn::batchnorm_backward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                                const float* mean, const float* var, const float* gamma, int N, int C, int HW,
                                float eps) {
  guarded("batch normalization backward",
          [&] { impl_->bn.backward(dx, dgamma, dbeta, dy, x, mean, var, gamma, N, C, HW, eps); });
}

void CpuCnn::batchnorm_relu_forward(float* y, float* mean, float* var, const float* x, const float* gamma,
                                    const float* beta, const float* residual, int N, int C, int HW, float eps,
                                    bool training) {
  impl_->bn.forward(y, mean, var, x, gamma, beta, N, C, HW, eps, training, residual, true);
}

void CpuCnn::relu_batchnorm_backward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                                     const float* mean, const float* var, const float* gamma, const float* beta,
                                     int N, int C, int HW, float eps) {
  impl_->bn.backward(dx, dgamma, dbeta, dy, x, mean, var, gamma, N, C, HW, eps, beta);
}

size_t CpuCnn::pool2d_workspace_bytes(const Pool2d& p) {
  size_t bytes = 0;
  guarded("pooling", [&] { bytes = impl_->pool(p).ws_bytes; });
  return bytes;
}

void CpuCnn::pool2d_forward(float* y, void* workspace, const float* x, const Pool2d& p) {
  guarded("pooling forward", [&] {
    PoolEntry& e = impl_->pool(p);
    bind(e.x, x), bind(e.y, y);
    if (e.ws_bytes) bind(e.ws, workspace);
    impl_->run(e.fwd);
  });
}

void CpuCnn::pool2d_backward(float* dx, const float* dy, const void* workspace, const Pool2d& p) {
  guarded("pooling backward", [&] {
    PoolEntry& e = impl_->pool(p);
    bind(e.dy, dy), bind(e.dx, dx);
    if (e.ws_bytes) bind(e.ws, workspace);
    impl_->run(e.bwd);
  });
}

}  // namespace baton
