// The CPU backend: CpuOps (the fp32 reference ops) behind baton::Backend, with activations and
// compute weights in fp32 or bf16. Emulated bf16: every op widens its bf16 arguments to fp32, runs
// the fp32 op and rounds what it stores once (round to nearest even) — the rounding points of the
// CUDA bf16 kernels (backend.h "Precision"). Native bf16 (backend.h CpuBf16): matmuls and
// convolutions instead run on the bf16 tensors in oneDNN (fp32 accumulation, same rounding
// points); the other ops stay emulated — they are memory-bound, and the attention's register-tiled
// kernel (cpu_attention.cpp, not a GEMM) is ~1% of a GPT-2 step's FLOPs at T = 64. Memory is host
// memory: 64-byte aligned (one cache line, one AVX-512 vector) and zero-initialised.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <sstream>
#include <vector>

#include "backend/cpu/cpu_bf16_matmul.h"
#include "backend/cpu/cpu_cnn.h"
#include "backend/cpu/cpu_math.h"
#include "backend/cpu/cpu_ops.h"
#include "core/bytes.h"
#include "core/error.h"

#include <fmt/format.h>

namespace baton {
namespace {

using cpu_detail::kSerialBelow;

void widen(float* dst, const uint16_t* src, size_t n) { cpu_math::widen_bf16(dst, src, n); }
void narrow(uint16_t* dst, const float* src, size_t n) { cpu_math::narrow_bf16(dst, src, n); }

// Where F32View's widened copies live: a per-thread stack of floats, reused from op to op. Views
// die in reverse order of creation (locals of one op), so a bump pointer suffices. Why not a
// std::vector per view: its zero fill and the page faults of freshly mapped memory cost more than
// the widening itself (measured: ~20% of a GPT-2 bf16 step with native matmuls). Blocks never move
// while views use them; when the stack empties, several blocks are merged into one, so after the
// first step nothing is allocated. Holds the largest widening seen (what the views needed anyway).
class WidenStack {
 public:
  float* push(size_t n) {
    n = round_up(n);
    if (blocks_.empty() || blocks_.back().used + n > blocks_.back().size)
      blocks_.push_back(block(std::max(n, 2 * (blocks_.empty() ? 0 : blocks_.back().size))));
    Block& b = blocks_.back();
    float* p = b.data.get() + b.used;
    b.used += n;
    depth_++;
    return p;
  }
  void pop(size_t n) {
    Block& b = blocks_.back();
    b.used -= round_up(n);
    if (b.used == 0 && blocks_.size() > 1) {  // views in earlier blocks are still alive
      retired_ += b.size;
      blocks_.pop_back();
    }
    if (--depth_ == 0 && retired_ > 0) merge();
  }

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  struct Block {
    std::unique_ptr<float[], Free> data;
    size_t size, used;
  };
  static size_t round_up(size_t n) { return (n + 15) / 16 * 16; }  // every view 64-byte aligned
  static Block block(size_t n) {
    auto* p = static_cast<float*>(std::aligned_alloc(64, std::max<size_t>(n, 16) * sizeof(float)));
    if (p == nullptr) throw std::bad_alloc();
    return Block{std::unique_ptr<float[], Free>(p), n, 0};
  }
  void merge() {
    size_t total = retired_;
    for (const Block& b : blocks_) total += b.size;
    retired_ = 0;
    blocks_.clear();
    blocks_.push_back(block(total));
  }
  std::vector<Block> blocks_;
  size_t retired_ = 0;  // sizes of blocks dropped since the stack was last empty
  int depth_ = 0;
};

WidenStack& widen_stack() {
  thread_local WidenStack s;
  return s;
}

// One activation argument of one op as fp32: the pointer itself when activations are fp32, else
// a widened copy that (for outputs) is rounded back into the bf16 tensor when the view dies.
class F32View {
 public:
  enum Mode { IN, OUT, INOUT };  // read; written (overwritten); read and written (+=, in place)
  F32View(DType t, const void* p, size_t n, Mode mode = IN)
      : bf16_(t == DType::BF16 && p != nullptr), mode_(mode), p_(const_cast<void*>(p)), n_(n) {
    BATON_ASSERT(t == DType::F32 || t == DType::BF16, "CPU activations are fp32 or bf16");
    if (!bf16_) return;
    buf_ = widen_stack().push(n);
    if (mode != OUT)
      widen(buf_, static_cast<const uint16_t*>(p), n);
    else  // zeros, as ever: elements an op leaves alone (padding columns) are stored as 0
      std::memset(buf_, 0, n * sizeof(float));
  }
  ~F32View() {
    if (!bf16_) return;
    if (mode_ != IN) narrow(static_cast<uint16_t*>(p_), buf_, n_);
    widen_stack().pop(n_);
  }
  F32View(const F32View&) = delete;
  F32View& operator=(const F32View&) = delete;
  float* get() { return bf16_ ? buf_ : static_cast<float*>(p_); }
  operator float*() { return get(); }

 private:
  bool bf16_;
  Mode mode_;
  void* p_;
  size_t n_;
  float* buf_ = nullptr;
};

// Logits and their (nullable) gradient, which may alias (the classifier works in place), as fp32:
// one widened copy, read and written, when they alias.
class LogitsAndGrad {
 public:
  LogitsAndGrad(DType t, const void* logits, void* dlogits, size_t n)
      : alias_(dlogits != nullptr && dlogits == logits),
        d_(t, dlogits, n, alias_ ? F32View::INOUT : F32View::OUT),
        l_(t, alias_ ? nullptr : logits, n) {}
  float* dlogits() { return d_.get(); }
  const float* logits() { return alias_ ? d_.get() : l_.get(); }

 private:
  bool alias_;
  F32View d_, l_;
};

// [N][A][B] -> [N][B][A] (NCHW <-> NHWC with A, B = C, HW or HW, C), elements of type T, in tiles
// of 32 × 32 so both sides stream through cache lines.
template <typename T>
void transpose_batches(T* dst, const T* src, int N, int A, int B) {
  constexpr int kTile = 32;
  const int tiles_a = (A + kTile - 1) / kTile, tiles_b = (B + kTile - 1) / kTile;
#pragma omp parallel for collapse(3) schedule(static) if (size_t(N) * A * B >= kSerialBelow)
  for (int n = 0; n < N; ++n)
    for (int ta = 0; ta < tiles_a; ++ta)
      for (int tb = 0; tb < tiles_b; ++tb) {
        const T* s = src + size_t(n) * A * B;
        T* d = dst + size_t(n) * A * B;
        for (int a = ta * kTile; a < std::min(A, (ta + 1) * kTile); ++a)
          for (int b = tb * kTile; b < std::min(B, (tb + 1) * kTile); ++b) d[size_t(b) * A + a] = s[size_t(a) * B + b];
      }
}

class CpuBackend final : public Backend {
 public:
  CpuBackend(DType act, CpuBf16 bf16) : act_(act) {
    BATON_REQUIRE(act == DType::F32 || act == DType::BF16,
                  fmt::format("the CPU backend cannot compute in {}", dtype_name(act)),
                  "use precision.compute = \"fp32\" or \"bf16\"");
    if (act != DType::BF16) return;
    const bool has = cpu_detail::cpu_has_bf16();
    BATON_REQUIRE(bf16 != CpuBf16::NATIVE || has,
                  "native bf16 was asked for (BATON_CPU_BF16=native) but this CPU has neither avx512_bf16 "
                  "nor amx_bf16",
                  "unset BATON_CPU_BF16 (auto: native where the CPU has it) or set it to \"emulated\"");
    native_ = bf16 == CpuBf16::NATIVE || (bf16 == CpuBf16::AUTO && has);
    if (native_) mm_ = std::make_unique<CpuBf16Matmul>();
  }
  std::string name() const override {
    if (act_ == DType::F32) return "cpu";
    return native_ ? "cpu (bf16 native)" : "cpu (bf16 emulated)";
  }
  DType act_dtype() const override { return act_; }

  void* alloc(size_t bytes) override {
    // aligned_alloc wants a size that is a multiple of the alignment; round up (and never 0). The
    // block's size sits in a header one alignment unit before the pointer handed out.
    size_t rounded = (bytes + 63) / 64 * 64;
    if (rounded == 0) rounded = 64;
    const size_t in_use = in_use_.load(std::memory_order_relaxed);
    if (limit_.bytes != 0 && in_use + rounded > limit_.bytes) throw memory_limit_error(limit_, bytes, in_use);
    auto* base = static_cast<char*>(std::aligned_alloc(64, rounded + kHeader));
    if (base == nullptr) throw std::bad_alloc();
    std::memset(base + kHeader, 0, rounded);
    *reinterpret_cast<size_t*>(base) = rounded;
    in_use_ += rounded;
    return base + kHeader;
  }
  void release(void* p) override {
    if (p == nullptr) return;
    char* base = static_cast<char*>(p) - kHeader;
    in_use_ -= *reinterpret_cast<const size_t*>(base);
    std::free(base);
  }
  void set_memory_limit(const MemoryLimit& limit) override { limit_ = limit; }
  std::string memory_summary() const override {
    if (limit_.bytes == 0) return {};
    return fmt::format("memory: {} in use of the {} limit{}", format_bytes(double(in_use_.load())),
                       format_bytes(double(limit_.bytes)),
                       limit_.device.empty() ? std::string() : fmt::format(" ({}, emulated)", limit_.device));
  }
  void to_device(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void to_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void zero_bytes(void* x, size_t bytes) override {
    auto* p = static_cast<char*>(x);
    per_thread(bytes, [&](size_t at, size_t len) { std::memset(p + at, 0, len); });
  }
  void copy_bytes(void* dst, const void* src, size_t bytes) override {
    auto* d = static_cast<char*>(dst);
    const auto* s = static_cast<const char*>(src);
    per_thread(bytes, [&](size_t at, size_t len) { std::memcpy(d + at, s + at, len); });
  }
  void cast(void* dst, DType dt, const void* src, DType st, size_t n) override {
    if (dt == st) return copy_bytes(dst, src, n * dtype_size(dt));
    if (dt == DType::BF16 && st == DType::F32)
      return narrow(static_cast<uint16_t*>(dst), static_cast<const float*>(src), n);
    if (dt == DType::F32 && st == DType::BF16)
      return widen(static_cast<float*>(dst), static_cast<const uint16_t*>(src), n);
    BATON_ASSERT(false, "cast {} -> {} is not supported", dtype_name(st), dtype_name(dt));
  }
  void scale(float* x, float s, size_t n) override { ops_.scale(x, s, n); }
  void add(float* dst, const float* src, size_t n) override { ops_.add(dst, src, n); }
  double sum_squares(const float* x, size_t n) override { return ops_.sum_squares(x, n); }
  void accumulate_sum(double* acc, const float* x, size_t n) override {
    double s = 0;  // in index order (n is a micro-batch's tokens: serial is fast enough)
    for (size_t i = 0; i < n; ++i) s += x[i];
    *acc += s;
  }

  void matmul_forward(void* out, const void* inp, const void* weight, const void* bias, int N,
                      int C, int OC) override {
    if (native_)
      return mm_->forward(static_cast<uint16_t*>(out), static_cast<const uint16_t*>(inp),
                          static_cast<const uint16_t*>(weight), static_cast<const uint16_t*>(bias), N, C, OC);
    F32View o(act_, out, size_t(N) * OC, F32View::OUT), i(act_, inp, size_t(N) * C),
        w(act_, weight, size_t(OC) * C), b(act_, bias, OC);
    ops_.matmul_forward(o, i, w, bias ? b.get() : nullptr, N, C, OC);
  }
  void matmul_backward(void* dinp, float* dweight, float* dbias, const void* dout, const void* inp,
                       const void* weight, int N, int C, int OC, bool accumulate_dinp,
                       bool accumulate_dweight) override {
    if (native_)
      return mm_->backward(static_cast<uint16_t*>(dinp), dweight, dbias, static_cast<const uint16_t*>(dout),
                           static_cast<const uint16_t*>(inp), static_cast<const uint16_t*>(weight), N, C, OC,
                           accumulate_dinp, accumulate_dweight);
    F32View di(act_, dinp, size_t(N) * C, accumulate_dinp ? F32View::INOUT : F32View::OUT),
        d(act_, dout, size_t(N) * OC), i(act_, dweight ? inp : nullptr, size_t(N) * C),
        w(act_, dinp ? weight : nullptr, size_t(OC) * C);
    ops_.matmul_backward(dinp ? di.get() : nullptr, dweight, dbias, d, dweight ? i.get() : nullptr,
                         dinp ? w.get() : nullptr, N, C, OC, accumulate_dinp, accumulate_dweight);
  }

  void layernorm_forward(void* out, float* mean, float* rstd, const void* inp, const void* weight,
                         const void* bias, int N, int C) override {
    if (act_ == DType::BF16)
      return ops_.layernorm_forward(bf(out), mean, rstd, bf(inp), bf(weight), bf(bias), N, C);
    const size_t n = size_t(N) * C;
    F32View o(act_, out, n, F32View::OUT), i(act_, inp, n), w(act_, weight, C), b(act_, bias, C);
    ops_.layernorm_forward(o, mean, rstd, i, w, b, N, C);
  }
  void layernorm_backward(void* dinp, const void* dres, float* dweight, float* dbias, const void* dout,
                          const void* inp, const void* weight, const float* mean, const float* rstd,
                          int N, int C) override {
    if (act_ == DType::BF16)
      return ops_.layernorm_backward(bf(dinp), bf(dres), dweight, dbias, bf(dout), bf(inp), bf(weight), mean, rstd,
                                     N, C);
    const size_t n = size_t(N) * C;
    const bool in_place = dinp != nullptr && dres == dinp;
    F32View di(act_, dinp, n, in_place ? F32View::INOUT : F32View::OUT),
        r(act_, dinp && !in_place ? dres : nullptr, n), d(act_, dout, n), i(act_, inp, n),
        w(act_, dinp ? weight : nullptr, C);
    float* dinp32 = dinp ? di.get() : nullptr;
    ops_.layernorm_backward(dinp32, in_place ? dinp32 : r.get(), dweight, dbias, d, i,
                            dinp ? w.get() : nullptr, mean, rstd, N, C);
  }
  void residual_layernorm_forward(void* residual, void* out, float* mean, float* rstd,
                                  const void* a, const void* b, const void* weight,
                                  const void* bias, int N, int C) override {
    if (act_ == DType::F32)
      return ops_.residual_layernorm_forward(
          static_cast<float*>(residual), static_cast<float*>(out), mean, rstd,
          static_cast<const float*>(a), static_cast<const float*>(b),
          static_cast<const float*>(weight), static_cast<const float*>(bias), N, C);
    ops_.residual_layernorm_forward(bf(residual), bf(out), mean, rstd, bf(a), bf(b), bf(weight), bf(bias), N, C);
  }
  void residual_forward(void* out, const void* a, const void* b, size_t n) override {
    if (act_ == DType::BF16) {  // one pass; the emulation's bits (fp32 sum of the widened values)
      auto* o = static_cast<uint16_t*>(out);
      const auto *x = static_cast<const uint16_t*>(a), *y = static_cast<const uint16_t*>(b);
#pragma omp parallel for simd schedule(static) if (n >= kSerialBelow)
      for (size_t i = 0; i < n; i++) o[i] = f32_to_bf16(bf16_to_f32(x[i]) + bf16_to_f32(y[i]));
      return;
    }
    F32View o(act_, out, n, F32View::OUT), x(act_, a, n), y(act_, b, n);
    ops_.residual_forward(o, x, y, n);
  }

  void gelu_forward(void* out, const void* inp, size_t n) override {
    if (act_ == DType::BF16)
      return cpu_math::gelu_map_bf16(static_cast<uint16_t*>(out), static_cast<const uint16_t*>(inp), nullptr, n, false);
    F32View o(act_, out, n, F32View::OUT), i(act_, inp, n);
    ops_.gelu_forward(o, i, n);
  }
  void gelu_backward(void* dinp, const void* inp, const void* dout, size_t n) override {
    if (act_ == DType::BF16)
      return cpu_math::gelu_map_bf16(static_cast<uint16_t*>(dinp), static_cast<const uint16_t*>(inp),
                                     static_cast<const uint16_t*>(dout), n, true);
    F32View di(act_, dinp, n, F32View::OUT), i(act_, inp, n), d(act_, dout, n);
    ops_.gelu_backward(di, i, d, n);
  }

  void attention_forward(void* out, float* state, const void* qkv, int B, int T, int C,
                         int NH) override {
    if (act_ == DType::BF16) return ops_.attention_forward(bf(out), state, bf(qkv), B, T, C, NH);
    const size_t n = size_t(B) * T * C;
    F32View o(act_, out, n, F32View::OUT), q(act_, qkv, 3 * n);
    ops_.attention_forward(o, state, q, B, T, C, NH);
  }
  void attention_backward(void* dqkv, const void* dout, const void*, const void* qkv,
                          const float* state, int B, int T, int C, int NH) override {
    if (act_ == DType::BF16) return ops_.attention_backward(bf(dqkv), bf(dout), bf(qkv), state, B, T, C, NH);
    const size_t n = size_t(B) * T * C;
    F32View dq(act_, dqkv, 3 * n, F32View::OUT), d(act_, dout, n), q(act_, qkv, 3 * n);
    ops_.attention_backward(dq, d, q, state, B, T, C, NH);
  }

  void embedding_forward(void* out, const int32_t* tokens, const void* wte, const void* wpe, int B,
                         int T, int C, int vocab_start, int vocab_rows) override {
    if (act_ == DType::BF16)  // row by row: the emulation widened the whole (vocab-sized) table
      return ops_.embedding_forward(bf(out), tokens, bf(wte), bf(wpe), B, T, C, vocab_start, vocab_rows);
    F32View o(act_, out, size_t(B) * T * C, F32View::OUT), e(act_, wte, size_t(vocab_rows) * C),
        p(act_, wpe, size_t(T) * C);
    ops_.embedding_forward(o, tokens, e, wpe ? p.get() : nullptr, B, T, C, vocab_start, vocab_rows);
  }
  void embedding_backward(float* dwte, float* dwpe, const void* dout, const int32_t* tokens,
                          const int32_t*, int B, int T, int C, int vocab_start,
                          int vocab_rows) override {
    F32View d(act_, dout, size_t(B) * T * C);
    ops_.embedding_backward(dwte, dwpe, d, tokens, B, T, C, vocab_start, vocab_rows);
  }

  void softmax_cross_entropy(float* losses, void* dlogits, const void* logits,
                             const int32_t* targets, int N, int V, int Vp, float dloss) override {
    LogitsAndGrad x(act_, logits, dlogits, size_t(N) * Vp);
    ops_.softmax_cross_entropy(losses, x.dlogits(), x.logits(), targets, N, V, Vp, dloss);
  }
  void logits_row_max(float* maxv, const void* logits, int N, int V_local, int Vl) override {
    F32View l(act_, logits, size_t(N) * Vl);
    ops_.logits_row_max(maxv, l, N, V_local, Vl);
  }
  void logits_sumexp_target(float* sumexp, float* target_logit, const void* logits,
                            const float* maxv, const int32_t* targets, int N, int V_local, int Vl,
                            int vocab_start) override {
    F32View l(act_, logits, size_t(N) * Vl);
    ops_.logits_sumexp_target(sumexp, target_logit, l, maxv, targets, N, V_local, Vl, vocab_start);
  }
  void cross_entropy_finish(float* losses, void* dlogits, const void* logits, const float* maxv,
                            const float* sumexp, const float* target_logit, const int32_t* targets,
                            int N, int V_local, int Vl, int vocab_start, float dloss) override {
    LogitsAndGrad x(act_, logits, dlogits, size_t(N) * Vl);
    ops_.cross_entropy_finish(losses, x.dlogits(), x.logits(), maxv, sumexp, target_logit, targets,
                              N, V_local, Vl, vocab_start, dloss);
  }

  // ---- CNN ops: oneDNN (cpu_cnn.h) on fp32 views, or on the bf16 tensors (native) ----
  void conv2d_forward(void* y, const void* x, const void* w, const void* bias, const Conv2d& c) override {
    const size_t nx = size_t(c.N) * c.C * c.H * c.W, nw = size_t(c.K) * c.C * c.R * c.S;
    if (native_) {
      F32View bi(act_, bias, size_t(c.K));  // the bias in fp32, as the emulation adds it
      return cnn_.conv2d_forward_bf16(static_cast<uint16_t*>(y), static_cast<const uint16_t*>(x),
                                      static_cast<const uint16_t*>(w), bias ? bi.get() : nullptr, c);
    }
    F32View yo(act_, y, size_t(c.N) * c.K * c.P() * c.Q(), F32View::OUT), xi(act_, x, nx), wi(act_, w, nw),
        bi(act_, bias, size_t(c.K));
    cnn_.conv2d_forward(yo, xi, wi, bias ? bi.get() : nullptr, c);
  }
  void conv2d_backward(void* dx, float* dw, float* db, const void* dy, const void* x, const void* w,
                       const Conv2d& c) override {
    const size_t nx = size_t(c.N) * c.C * c.H * c.W, nw = size_t(c.K) * c.C * c.R * c.S;
    if (native_)
      return cnn_.conv2d_backward_bf16(static_cast<uint16_t*>(dx), dw, db, static_cast<const uint16_t*>(dy),
                                       static_cast<const uint16_t*>(x), static_cast<const uint16_t*>(w), c);
    F32View dxo(act_, dx, nx, F32View::OUT), dyi(act_, dy, size_t(c.N) * c.K * c.P() * c.Q()),
        xi(act_, dw || db ? x : nullptr, nx), wi(act_, dx ? w : nullptr, nw);
    cnn_.conv2d_backward(dx ? dxo.get() : nullptr, dw, db, dyi, xi, wi, c);
  }
  void batchnorm_forward(void* y, float* mean, float* var, const void* x, const void* gamma, const void* beta,
                         int N, int C, int HW, float eps, bool training) override {
    const size_t n = size_t(N) * C * HW;
    F32View yo(act_, y, n, F32View::OUT), xi(act_, x, n), g(act_, gamma, size_t(C)), b(act_, beta, size_t(C));
    cnn_.batchnorm_forward(yo, mean, var, xi, g, b, N, C, HW, eps, training);
  }
  void batchnorm_backward(void* dx, float* dgamma, float* dbeta, const void* dy, const void* x, const float* mean,
                          const float* var, const void* gamma, int N, int C, int HW, float eps) override {
    const size_t n = size_t(N) * C * HW;
    F32View dxo(act_, dx, n, F32View::OUT), dyi(act_, dy, n), xi(act_, x, n), g(act_, gamma, size_t(C));
    cnn_.batchnorm_backward(dxo, dgamma, dbeta, dyi, xi, mean, var, g, N, C, HW, eps);
  }
  // Fused in fp32 (cpu_batchnorm.h); in bf16 the unfused ops, which round between them as the GPU's do.
  void batchnorm_relu_forward(void* y, float* mean, float* var, const void* x, const void* gamma, const void* beta,
                              const void* residual, int N, int C, int HW, float eps, bool training) override {
    if (act_ != DType::F32)
      return Backend::batchnorm_relu_forward(y, mean, var, x, gamma, beta, residual, N, C, HW, eps, training);
    cnn_.batchnorm_relu_forward(static_cast<float*>(y), mean, var, static_cast<const float*>(x),
                                static_cast<const float*>(gamma), static_cast<const float*>(beta),
                                static_cast<const float*>(residual), N, C, HW, eps, training);
  }
  void relu_batchnorm_backward(void* dx, float* dgamma, float* dbeta, const void* dy, const void* y, const void* x,
                               const float* mean, const float* var, const void* gamma, const void* beta, int N, int C,
                               int HW, float eps, void* scratch) override {
    if (act_ != DType::F32)
      return Backend::relu_batchnorm_backward(dx, dgamma, dbeta, dy, y, x, mean, var, gamma, beta, N, C, HW, eps,
                                              scratch);
    cnn_.relu_batchnorm_backward(static_cast<float*>(dx), dgamma, dbeta, static_cast<const float*>(dy),
                                 static_cast<const float*>(x), mean, var, static_cast<const float*>(gamma),
                                 static_cast<const float*>(beta), N, C, HW, eps);
  }
  void relu_forward(void* y, const void* x, size_t n) override {
    F32View yo(act_, y, n, F32View::OUT), xi(act_, x, n);
    float *o = yo, *i = xi;
#pragma omp parallel for simd schedule(static) if (n >= kSerialBelow)
    for (size_t k = 0; k < n; ++k) o[k] = !(i[k] <= 0.0f) ? i[k] : 0.0f;  // NaN stays NaN (backend.h)
  }
  void relu_backward(void* dx, const void* y, const void* dy, size_t n) override {
    F32View dxo(act_, dx, n, dx == dy ? F32View::INOUT : F32View::OUT), yi(act_, y, n), dyi(act_, dx == dy ? nullptr : dy, n);
    float *d = dxo, *o = yi;
    const float* g = dx == dy ? d : dyi.get();
#pragma omp parallel for simd schedule(static) if (n >= kSerialBelow)
    for (size_t k = 0; k < n; ++k) {
      const float gk = g[k];  // loaded unconditionally: the loop vectorizes (a blend, no branch)
      d[k] = o[k] > 0.0f ? gk : 0.0f;
    }
  }
  size_t pool2d_workspace_bytes(const Pool2d& p) const override { return cnn_.pool2d_workspace_bytes(p); }
  void pool2d_forward(void* y, void* workspace, const void* x, const Pool2d& p) override {
    F32View yo(act_, y, size_t(p.N) * p.C * p.P() * p.Q(), F32View::OUT), xi(act_, x, size_t(p.N) * p.C * p.H * p.W);
    cnn_.pool2d_forward(yo, workspace, xi, p);
  }
  void pool2d_backward(void* dx, const void* dy, const void* workspace, const Pool2d& p) override {
    F32View dxo(act_, dx, size_t(p.N) * p.C * p.H * p.W, F32View::OUT), dyi(act_, dy, size_t(p.N) * p.C * p.P() * p.Q());
    cnn_.pool2d_backward(dxo, dyi, workspace, p);
  }
  void axpby(float* y, float a, const float* x, float b, size_t n) override {
#pragma omp parallel for simd schedule(static) if (n >= kSerialBelow)
    for (size_t k = 0; k < n; ++k) y[k] = a * x[k] + b * y[k];
  }

  ImageLayout image_layout() const override { return ImageLayout::NHWC; }
  void images_to_activations(void* dst, const float* images, int N, int C, int H, int W) override {
    const size_t n = size_t(N) * C * H * W;
    F32View d(act_, dst, n, F32View::OUT);
    transpose_batches(d.get(), images, N, C, H * W);
  }
  void activations_to_nchw(void* dst, const void* src, int N, int C, int H, int W) override {
    transpose_act(dst, src, N, H * W, C);
  }
  void nchw_to_activations(void* dst, const void* src, int N, int C, int H, int W) override {
    transpose_act(dst, src, N, C, H * W);
  }

  void dropout(void* y, const void* x, int rows, int row_elems, float p, uint64_t seed,
               int64_t first_row) override {
    const size_t n = size_t(rows) * row_elems;
    F32View yo(act_, y, n, y == x ? F32View::INOUT : F32View::OUT), xi(act_, y == x ? nullptr : x, n);
    ops_.dropout(yo, y == x ? yo.get() : xi.get(), rows, row_elems, p, seed, first_row);
  }
  void classification_hits(float* hits1, float* hits5, const void* logits, const int32_t* targets, int N,
                           int V, int ld) override {
    F32View l(act_, logits, size_t(N) * ld);
    ops_.classification_hits(hits1, hits5, l, targets, N, V, ld);
  }

  void sgd_step(float* param, const float* grad, float* buf, size_t n, const SgdArgs& args) override {
    ops_.sgd_step(param, grad, buf, n, args);
  }
  void adamw_step(float* param, const float* grad, float* m, float* v, size_t n,
                  const AdamWArgs& args) override {
    ops_.adamw_step(param, grad, m, v, n, args);
  }

 private:
  static uint16_t* bf(void* p) { return static_cast<uint16_t*>(p); }
  static const uint16_t* bf(const void* p) { return static_cast<const uint16_t*>(p); }
  void transpose_act(void* dst, const void* src, int N, int A, int B) const {
    if (act_ == DType::F32)
      transpose_batches(static_cast<float*>(dst), static_cast<const float*>(src), N, A, B);
    else
      transpose_batches(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), N, A, B);
  }
  // f(at, len) over [0, bytes): one contiguous piece per OpenMP thread (cache-line aligned), so that
  // glibc's memset/memcpy see sizes large enough for their non-temporal stores (a 365 MB gradient
  // zeroing: 35 GB/s in 1 MiB pieces, 40-43 GB/s in halves).
  template <class F>
  static void per_thread(size_t bytes, F f) {
    if (bytes == 0) return;  // the pointers of an empty tensor may be null: memcpy's are never
    if (bytes < 4 * kSerialBelow) return f(0, bytes);
#pragma omp parallel
    {
      const size_t t = omp_get_thread_num(), nt = omp_get_num_threads();
      const size_t lo = std::min(bytes, bytes * t / nt / 64 * 64);
      const size_t hi = t + 1 == nt ? bytes : std::min(bytes, bytes * (t + 1) / nt / 64 * 64);
      if (hi > lo) f(lo, hi - lo);
    }
  }
  static constexpr size_t kHeader = 64;  // alloc()'s size header; keeps the 64-byte alignment

  MemoryLimit limit_;
  std::atomic<size_t> in_use_{0};
  DType act_;
  bool native_ = false;  // bf16 matmuls and convolutions in oneDNN (CpuBf16::NATIVE)
  std::unique_ptr<CpuBf16Matmul> mm_;  // when native_
  CpuOps ops_;
  mutable CpuCnn cnn_;  // primitive caches (pool2d_workspace_bytes builds them too)
};

bool g_hide_bf16 = false;

bool detect_bf16() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line);
    for (std::string w; words >> w;)
      if (w == "avx512_bf16" || w == "amx_bf16") return true;
    return false;  // the first processor's flags speak for all
  }
  return false;
}

}  // namespace

namespace cpu_detail {
bool cpu_has_bf16() {
  static const bool has = detect_bf16();
  return has && !g_hide_bf16;
}
void hide_cpu_bf16(bool hide) { g_hide_bf16 = hide; }
}  // namespace cpu_detail

CpuBf16 parse_cpu_bf16(const std::string& s, const std::string& what) {
  if (s == "auto") return CpuBf16::AUTO;
  if (s == "native") return CpuBf16::NATIVE;
  if (s == "emulated") return CpuBf16::EMULATED;
  throw Error(fmt::format("{} = \"{}\" is not a CPU bf16 mode", what, s),
              "use \"auto\" (native where the CPU has avx512_bf16 or amx_bf16), \"native\" or \"emulated\"");
}

std::unique_ptr<Backend> make_cpu_backend(DType act, CpuBf16 bf16) {
  cpu_gemm_engine();  // a bad BATON_CPU_GEMM is one error here, before any step
  return std::make_unique<CpuBackend>(act, bf16);
}

}  // namespace baton
