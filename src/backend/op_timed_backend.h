// OpTimedBackend: the op-time table (`BATON_OP_TIMES=1`; issue 20 part A item 2). A Backend that
// forwards every call to the one it wraps, unchanged, and times each op with that backend's own
// OpClock — the wall clock on the CPU (its ops are synchronous), CUDA events on a GPU's stream (no
// synchronisation per op) — so a step can be seen op by op without a profiler. Each op also counts
// its FLOPs (the GEMM-like ones: matmuls, attention, convolutions, as the model-FLOPs formulas
// count them: causal attention at half of the full T x T products, backward at twice the forward)
// and the fewest bytes it must move (each input read once, each output written once), so the
// table gives achieved TFLOP/s or GB/s beside each op's share of the step.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace baton {
namespace op_cost {
inline double conv_flops(const Conv2d& c) { return 2.0 * c.N * c.K * c.P() * c.Q() * double(c.C) * c.R * c.S; }
inline double conv_elems(const Conv2d& c) {
  return double(c.N) * c.C * c.H * c.W + double(c.K) * c.C * c.R * c.S + double(c.N) * c.K * c.P() * c.Q();
}
inline double pool_elems(const Pool2d& p) { return double(p.N) * p.C * (double(p.H) * p.W + p.P() * p.Q()); }
inline size_t span_floats(const std::vector<std::pair<size_t, size_t>>& spans) {
  size_t n = 0;
  for (const auto& sp : spans) n += sp.second;
  return n;
}
inline size_t segment_floats(const std::vector<AdamWSegment>& segments) {
  size_t n = 0;
  for (const auto& s : segments) n += s.n;
  return n;
}
}  // namespace op_cost

class OpTimedBackend final : public Backend {
 public:
  enum class Op : uint8_t {
    to_device,
    to_host,
    zero_bytes,
    copy_bytes,
    cast,
    scale,
    add,
    sum_squares,
    sum_squares_spans,
    accumulate_sum,
    matmul_forward,
    matmul_gelu_forward,
    matmul_backward,
    matmul_backward_gelu,
    layernorm_forward,
    layernorm_backward,
    residual_layernorm_forward,
    residual_forward,
    gelu_forward,
    gelu_backward,
    attention_forward,
    attention_backward,
    embedding_forward,
    embedding_backward,
    softmax_cross_entropy,
    logits_row_max,
    logits_sumexp_target,
    cross_entropy_finish,
    images_to_activations,
    activations_to_nchw,
    nchw_to_activations,
    conv2d_forward,
    conv2d_backward,
    batchnorm_forward,
    batchnorm_backward,
    relu_forward,
    relu_backward,
    batchnorm_relu_forward,
    relu_batchnorm_backward,
    pool2d_forward,
    pool2d_backward,
    axpby,
    dropout,
    classification_hits,
    adamw_step,
    adamw_step_segments,
    sgd_step,
    kCount
  };
  struct Row {
    std::string op;
    int64_t calls = 0;
    double ms = 0, flops = 0, bytes = 0;  // totals since the last reset()
  };

  explicit OpTimedBackend(std::unique_ptr<Backend> inner);
  // Forgets what was timed so far (the warm-up steps).
  void reset();
  // One row per op kind that ran, the slowest first (resolves the clock's pending spans).
  std::vector<Row> rows();
  // The table: per step (over `steps` steps of `step_ms` milliseconds in all) calls, ms, share of
  // the step, TFLOP/s and GB/s, then the ops' total and the rest of the step (host work,
  // communication, waiting: what no backend op accounts for).
  static std::string table(const std::vector<Row>& rows, double step_ms, int steps);

  Backend& unwrapped() override { return inner_->unwrapped(); }
  std::unique_ptr<OpClock> make_op_clock() override { return inner_->make_op_clock(); }

  std::string name() const override { return inner_->name(); }
  DType act_dtype() const override { return inner_->act_dtype(); }
  void* alloc(size_t bytes) override { return inner_->alloc(bytes); }
  void release(void* p) override { inner_->release(p); }
  void set_memory_limit(const MemoryLimit& limit) override { inner_->set_memory_limit(limit); }
  void to_device(void* dst, const void* src_host, size_t bytes) override {
    const Span span(*this, Op::to_device, 0, double(bytes));
    inner_->to_device(dst, src_host, bytes);
  }
  void to_host(void* dst_host, const void* src, size_t bytes) override {
    const Span span(*this, Op::to_host, 0, double(bytes));
    inner_->to_host(dst_host, src, bytes);
  }
  void zero_bytes(void* x, size_t bytes) override {
    const Span span(*this, Op::zero_bytes, 0, double(bytes));
    inner_->zero_bytes(x, bytes);
  }
  void copy_bytes(void* dst, const void* src, size_t bytes) override {
    const Span span(*this, Op::copy_bytes, 0, 2.0 * double(bytes));
    inner_->copy_bytes(dst, src, bytes);
  }
  void cast(void* dst, DType dst_type, const void* src, DType src_type, size_t n) override {
    const Span span(*this, Op::cast, 0, double(n) * double(dtype_size(dst_type) + dtype_size(src_type)));
    inner_->cast(dst, dst_type, src, src_type, n);
  }
  void scale(float* x, float s, size_t n) override {
    const Span span(*this, Op::scale, 0, 8.0 * double(n));
    inner_->scale(x, s, n);
  }
  void add(float* dst, const float* src, size_t n) override {
    const Span span(*this, Op::add, 0, 12.0 * double(n));
    inner_->add(dst, src, n);
  }
  double sum_squares(const float* x, size_t n) override {
    const Span span(*this, Op::sum_squares, 0, 4.0 * double(n));
    return inner_->sum_squares(x, n);
  }
  double sum_squares_spans(const float* x, const std::vector<std::pair<size_t, size_t>>& spans) override {
    const Span span(*this, Op::sum_squares_spans, 0, 4.0 * double(op_cost::span_floats(spans)));
    return inner_->sum_squares_spans(x, spans);
  }
  void accumulate_sum(double* acc, const float* x, size_t n) override {
    const Span span(*this, Op::accumulate_sum, 0, 4.0 * double(n));
    inner_->accumulate_sum(acc, x, n);
  }
  void synchronize() override { inner_->synchronize(); }
  std::string memory_summary() const override { return inner_->memory_summary(); }
  std::string kernel_summary() const override { return inner_->kernel_summary(); }
  void* native_stream() const override { return inner_->native_stream(); }
  void matmul_forward(void* out, const void* inp, const void* weight, const void* bias, int N, int C,
                      int OC) override {
    const Span span(*this, Op::matmul_forward, 2.0 * N * C * OC,
                    double(act_size()) * (double(N) * C + double(OC) * C + double(N) * OC));
    inner_->matmul_forward(out, inp, weight, bias, N, C, OC);
  }
  void matmul_gelu_forward(void* pre, void* out, const void* inp, const void* weight, const void* bias, int N, int C,
                           int OC) override {
    const Span span(*this, Op::matmul_gelu_forward, 2.0 * N * C * OC,
                    double(act_size()) * (double(N) * C + double(OC) * C + 2.0 * N * OC));
    inner_->matmul_gelu_forward(pre, out, inp, weight, bias, N, C, OC);
  }
  void matmul_backward(void* dinp, float* dweight, float* dbias, const void* dout, const void* inp,
                       const void* weight, int N, int C, int OC, bool accumulate_dinp,
                       bool accumulate_dweight) override {
    const Span span(*this, Op::matmul_backward, 2.0 * N * C * OC * ((dinp ? 1 : 0) + (dweight ? 1 : 0)),
                    double(act_size()) * (double(N) * C + double(OC) * C + double(N) * OC));
    inner_->matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, accumulate_dinp, accumulate_dweight);
  }
  void matmul_backward_gelu(void* dpre, float* dweight, float* dbias, const void* dout, const void* inp,
                            const void* weight, const void* pre, int N, int C, int OC,
                            bool accumulate_dweight) override {
    const Span span(*this, Op::matmul_backward_gelu, 2.0 * N * C * OC * ((dpre ? 1 : 0) + (dweight ? 1 : 0)),
                    double(act_size()) * (2.0 * N * C + double(OC) * C + double(N) * OC));
    inner_->matmul_backward_gelu(dpre, dweight, dbias, dout, inp, weight, pre, N, C, OC, accumulate_dweight);
  }
  void layernorm_forward(void* out, float* mean, float* rstd, const void* inp, const void* weight, const void* bias,
                         int N, int C) override {
    const Span span(*this, Op::layernorm_forward, 0, double(act_size()) * 2.0 * N * C);
    inner_->layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
  }
  void layernorm_backward(void* dinp, const void* dres, float* dweight, float* dbias, const void* dout,
                          const void* inp, const void* weight, const float* mean, const float* rstd, int N,
                          int C) override {
    const Span span(*this, Op::layernorm_backward, 0, double(act_size()) * 3.0 * N * C);
    inner_->layernorm_backward(dinp, dres, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
  }
  void residual_layernorm_forward(void* residual, void* out, float* mean, float* rstd, const void* a, const void* b,
                                  const void* weight, const void* bias, int N, int C) override {
    const Span span(*this, Op::residual_layernorm_forward, 0, double(act_size()) * 4.0 * N * C);
    inner_->residual_layernorm_forward(residual, out, mean, rstd, a, b, weight, bias, N, C);
  }
  void residual_forward(void* out, const void* a, const void* b, size_t n) override {
    const Span span(*this, Op::residual_forward, 0, double(act_size()) * 3.0 * double(n));
    inner_->residual_forward(out, a, b, n);
  }
  void gelu_forward(void* out, const void* inp, size_t n) override {
    const Span span(*this, Op::gelu_forward, 0, double(act_size()) * 2.0 * double(n));
    inner_->gelu_forward(out, inp, n);
  }
  void gelu_backward(void* dinp, const void* inp, const void* dout, size_t n) override {
    const Span span(*this, Op::gelu_backward, 0, double(act_size()) * 3.0 * double(n));
    inner_->gelu_backward(dinp, inp, dout, n);
  }
  size_t attention_state_floats(int B, int T, int C, int NH) const override {
    return inner_->attention_state_floats(B, T, C, NH);
  }
  void attention_forward(void* out, float* state, const void* qkv, int B, int T, int C, int NH) override {
    const Span span(*this, Op::attention_forward, 2.0 * B * double(T) * T * C, double(act_size()) * 4.0 * B * T * C);
    inner_->attention_forward(out, state, qkv, B, T, C, NH);
  }
  void attention_backward(void* dqkv, const void* dout, const void* out, const void* qkv, const float* state, int B,
                          int T, int C, int NH) override {
    const Span span(*this, Op::attention_backward, 4.0 * B * double(T) * T * C, double(act_size()) * 8.0 * B * T * C);
    inner_->attention_backward(dqkv, dout, out, qkv, state, B, T, C, NH);
  }
  void embedding_forward(void* out, const int32_t* tokens, const void* wte, const void* wpe, int B, int T, int C,
                         int vocab_start, int vocab_rows) override {
    const Span span(*this, Op::embedding_forward, 0, double(act_size()) * 2.0 * B * T * C);
    inner_->embedding_forward(out, tokens, wte, wpe, B, T, C, vocab_start, vocab_rows);
  }
  void embedding_backward(float* dwte, float* dwpe, const void* dout, const int32_t* tokens,
                          const int32_t* tokens_host, int B, int T, int C, int vocab_start, int vocab_rows) override {
    const Span span(*this, Op::embedding_backward, 0, 8.0 * B * T * C);
    inner_->embedding_backward(dwte, dwpe, dout, tokens, tokens_host, B, T, C, vocab_start, vocab_rows);
  }
  void softmax_cross_entropy(float* losses, void* dlogits, const void* logits, const int32_t* targets, int N, int V,
                             int Vp, float dloss) override {
    const Span span(*this, Op::softmax_cross_entropy, 0, double(act_size()) * 2.0 * N * Vp);
    inner_->softmax_cross_entropy(losses, dlogits, logits, targets, N, V, Vp, dloss);
  }
  void logits_row_max(float* maxv, const void* logits, int N, int V_local, int Vl) override {
    const Span span(*this, Op::logits_row_max, 0, double(act_size()) * double(N) * Vl);
    inner_->logits_row_max(maxv, logits, N, V_local, Vl);
  }
  void logits_sumexp_target(float* sumexp, float* target_logit, const void* logits, const float* maxv,
                            const int32_t* targets, int N, int V_local, int Vl, int vocab_start) override {
    const Span span(*this, Op::logits_sumexp_target, 0, double(act_size()) * double(N) * Vl);
    inner_->logits_sumexp_target(sumexp, target_logit, logits, maxv, targets, N, V_local, Vl, vocab_start);
  }
  void cross_entropy_finish(float* losses, void* dlogits, const void* logits, const float* maxv, const float* sumexp,
                            const float* target_logit, const int32_t* targets, int N, int V_local, int Vl,
                            int vocab_start, float dloss) override {
    const Span span(*this, Op::cross_entropy_finish, 0, double(act_size()) * 2.0 * N * Vl);
    inner_->cross_entropy_finish(losses, dlogits, logits, maxv, sumexp, target_logit, targets, N, V_local, Vl,
                                 vocab_start, dloss);
  }
  ImageLayout image_layout() const override { return inner_->image_layout(); }
  void images_to_activations(void* dst, const float* images, int N, int C, int H, int W) override {
    const Span span(*this, Op::images_to_activations, 0, (4.0 + double(act_size())) * N * C * H * W);
    inner_->images_to_activations(dst, images, N, C, H, W);
  }
  void activations_to_nchw(void* dst, const void* src, int N, int C, int H, int W) override {
    const Span span(*this, Op::activations_to_nchw, 0, double(act_size()) * 2.0 * N * C * H * W);
    inner_->activations_to_nchw(dst, src, N, C, H, W);
  }
  void nchw_to_activations(void* dst, const void* src, int N, int C, int H, int W) override {
    const Span span(*this, Op::nchw_to_activations, 0, double(act_size()) * 2.0 * N * C * H * W);
    inner_->nchw_to_activations(dst, src, N, C, H, W);
  }
  void conv2d_forward(void* y, const void* x, const void* w, const void* bias, const Conv2d& c) override {
    const Span span(*this, Op::conv2d_forward, op_cost::conv_flops(c), double(act_size()) * op_cost::conv_elems(c));
    inner_->conv2d_forward(y, x, w, bias, c);
  }
  void conv2d_backward(void* dx, float* dw, float* db, const void* dy, const void* x, const void* w,
                       const Conv2d& c) override {
    const Span span(*this, Op::conv2d_backward, op_cost::conv_flops(c) * ((dx ? 1 : 0) + (dw ? 1 : 0)),
                    double(act_size()) * op_cost::conv_elems(c));
    inner_->conv2d_backward(dx, dw, db, dy, x, w, c);
  }
  void batchnorm_forward(void* y, float* mean, float* var, const void* x, const void* gamma, const void* beta, int N,
                         int C, int HW, float eps, bool training) override {
    const Span span(*this, Op::batchnorm_forward, 0, double(act_size()) * 2.0 * N * C * HW);
    inner_->batchnorm_forward(y, mean, var, x, gamma, beta, N, C, HW, eps, training);
  }
  void batchnorm_backward(void* dx, float* dgamma, float* dbeta, const void* dy, const void* x, const float* mean,
                          const float* var, const void* gamma, int N, int C, int HW, float eps) override {
    const Span span(*this, Op::batchnorm_backward, 0, double(act_size()) * 3.0 * N * C * HW);
    inner_->batchnorm_backward(dx, dgamma, dbeta, dy, x, mean, var, gamma, N, C, HW, eps);
  }
  void relu_forward(void* y, const void* x, size_t n) override {
    const Span span(*this, Op::relu_forward, 0, double(act_size()) * 2.0 * double(n));
    inner_->relu_forward(y, x, n);
  }
  void relu_backward(void* dx, const void* y, const void* dy, size_t n) override {
    const Span span(*this, Op::relu_backward, 0, double(act_size()) * 3.0 * double(n));
    inner_->relu_backward(dx, y, dy, n);
  }
  // Bytes as the fused CPU kernels move them: x read twice and y written (+ the residual read);
  // x and dy read twice, dx written.
  void batchnorm_relu_forward(void* y, float* mean, float* var, const void* x, const void* gamma, const void* beta,
                              const void* residual, int N, int C, int HW, float eps, bool training) override {
    const Span span(*this, Op::batchnorm_relu_forward, 0, double(act_size()) * (residual ? 4.0 : 3.0) * N * C * HW);
    inner_->batchnorm_relu_forward(y, mean, var, x, gamma, beta, residual, N, C, HW, eps, training);
  }
  void relu_batchnorm_backward(void* dx, float* dgamma, float* dbeta, const void* dy, const void* y, const void* x,
                               const float* mean, const float* var, const void* gamma, const void* beta, int N, int C,
                               int HW, float eps, void* scratch) override {
    const Span span(*this, Op::relu_batchnorm_backward, 0, double(act_size()) * 5.0 * N * C * HW);
    inner_->relu_batchnorm_backward(dx, dgamma, dbeta, dy, y, x, mean, var, gamma, beta, N, C, HW, eps, scratch);
  }
  size_t pool2d_workspace_bytes(const Pool2d& p) const override { return inner_->pool2d_workspace_bytes(p); }
  void pool2d_forward(void* y, void* workspace, const void* x, const Pool2d& p) override {
    const Span span(*this, Op::pool2d_forward, 0, double(act_size()) * op_cost::pool_elems(p));
    inner_->pool2d_forward(y, workspace, x, p);
  }
  void pool2d_backward(void* dx, const void* dy, const void* workspace, const Pool2d& p) override {
    const Span span(*this, Op::pool2d_backward, 0, double(act_size()) * op_cost::pool_elems(p));
    inner_->pool2d_backward(dx, dy, workspace, p);
  }
  void axpby(float* y, float a, const float* x, float b, size_t n) override {
    const Span span(*this, Op::axpby, 0, 12.0 * double(n));
    inner_->axpby(y, a, x, b, n);
  }
  void dropout(void* y, const void* x, int rows, int row_elems, float p, uint64_t seed, int64_t first_row) override {
    const Span span(*this, Op::dropout, 0, double(act_size()) * 2.0 * rows * row_elems);
    inner_->dropout(y, x, rows, row_elems, p, seed, first_row);
  }
  void classification_hits(float* hits1, float* hits5, const void* logits, const int32_t* targets, int N, int V,
                           int ld) override {
    const Span span(*this, Op::classification_hits, 0, double(act_size()) * double(N) * ld);
    inner_->classification_hits(hits1, hits5, logits, targets, N, V, ld);
  }
  void adamw_step(float* param, const float* grad, float* m, float* v, size_t n, const AdamWArgs& args) override {
    const Span span(*this, Op::adamw_step, 0, 28.0 * double(n));
    inner_->adamw_step(param, grad, m, v, n, args);
  }
  void adamw_step_segments(float* params, const float* grads, float* m, float* v,
                           const std::vector<AdamWSegment>& segments, const AdamWArgs& base) override {
    const Span span(*this, Op::adamw_step_segments, 0, 28.0 * double(op_cost::segment_floats(segments)));
    inner_->adamw_step_segments(params, grads, m, v, segments, base);
  }
  void sgd_step(float* param, const float* grad, float* buf, size_t n, const SgdArgs& args) override {
    const Span span(*this, Op::sgd_step, 0, 20.0 * double(n));
    inner_->sgd_step(param, grad, buf, n, args);
  }

 private:
  // Times one op: the clock starts when it is made and stops when it goes.
  class Span {
   public:
    Span(OpTimedBackend& b, Op op, double flops, double bytes);
    ~Span();
    Span(const Span&) = delete;
    Span& operator=(const Span&) = delete;

   private:
    OpTimedBackend& b_;
    Op op_;
    double flops_, bytes_;
  };
  struct Pending {
    Op op;
    double flops, bytes;
  };
  void collect();  // the clock's spans into the totals

  std::unique_ptr<Backend> inner_;
  std::unique_ptr<OpClock> clock_;
  std::vector<Pending> pending_;
  std::vector<Row> totals_;  // by Op
};

// BATON_OP_TIMES=1 in the environment (anything else but unset, "" or "0" is an error).
bool op_times_requested();

}  // namespace baton
