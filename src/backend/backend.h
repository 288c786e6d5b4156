// Backend: the ops a layer needs, at layer granularity (DESIGN §5). CPU and CUDA implement the same
// interface; every op of a faster backend is tested against the CPU op.
//
// Conventions (llm.c style): tensors are raw pointers in the backend's memory with explicit sizes;
// shape comments use B batch, T sequence, C channels, NH heads, HS = C/NH head size, V vocab,
// Vp padded vocab, N = B*T rows, OC output channels. All row-major.
//
// Precision (issue 6): `void*` arguments are activations or compute weights, stored in the
// backend's act_dtype() — fp32, or bf16 for mixed precision (precision.compute = "bf16"). `float*`
// arguments are always fp32: parameter gradients, optimizer state, layernorm statistics, losses,
// classifier row statistics and the attention state. Ops load their inputs, compute in fp32 and
// round each stored activation once (round to nearest even); "+=" into an activation rounds the
// fp32 sum once. Parameter gradients accumulate in fp32 straight from the (bf16) inputs.
//
// Gradient semantics: parameter gradients are ACCUMULATED (+=) so micro-batches sum into them;
// activation gradients are overwritten unless the argument says "accumulate".
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"

namespace baton {

// An emulated device's memory (config/device_emulation.h, docs/hetpipe.md "Heterogeneity on one
// machine"): the backend refuses an allocation that would take its memory in use beyond `bytes`.
struct MemoryLimit {
  size_t bytes = 0;    // 0 = unlimited
  int rank = 0;        // for the error
  std::string device;  // the device the rank stands for ("" = none named), for the error
};
class Error;
// The error an allocation of `bytes` with `in_use` already allocated raises when it would pass
// `limit` (the same line and hint on every backend).
Error memory_limit_error(const MemoryLimit& limit, size_t bytes, size_t in_use);

struct AdamWArgs {
  float lr = 0;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0;  // decoupled (AdamW): param -= lr * wd * param
  int64_t step = 1;        // 1-based, for bias correction
  float grad_scale = 1.0f; // gradients are multiplied by this before use (clipping, averaging)
};

// One tensor of a multi-tensor AdamW step (Backend::adamw_step_segments): param and grad at
// params + flat and grads + flat, m and v at m + state and v + state, n elements, its weight decay.
struct AdamWSegment {
  size_t flat = 0;
  size_t state = 0;
  size_t n = 0;
  float weight_decay = 0;
  bool operator==(const AdamWSegment&) const = default;
};

// SGD with momentum (PyTorch's, dampening 0); weight decay either added to the gradient (`l2`) or
// applied to the weights (`decoupled`, SGDW), at most one non-zero.
struct SgdArgs {
  float lr = 0;
  float momentum = 0;
  bool nesterov = false;
  float l2 = 0;
  float decoupled = 0;
  float grad_scale = 1.0f;
};

// A 2-D convolution over NCHW activations: x[N,C,H,W] * w[K,C,R,S] (+ bias[K]) -> y[N,K,P,Q],
// stride and zero padding the same in both directions, dilation 1.
struct Conv2d {
  int N = 1, C = 1, H = 1, W = 1;  // input
  int K = 1, R = 1, S = 1;         // output channels, kernel height and width
  int stride = 1, pad = 0;
  int P() const { return (H + 2 * pad - R) / stride + 1; }
  int Q() const { return (W + 2 * pad - S) / stride + 1; }
  bool operator==(const Conv2d&) const = default;
};

// Max or average pooling over NCHW activations (average: padding counted, as PyTorch's default;
// the ResNet's global average pool has none).
struct Pool2d {
  int N = 1, C = 1, H = 1, W = 1;
  int R = 1, S = 1, stride = 1, pad = 0;
  bool max = true;
  int P() const { return (H + 2 * pad - R) / stride + 1; }
  int Q() const { return (W + 2 * pad - S) / stride + 1; }
  bool operator==(const Pool2d&) const = default;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // The dtype of activations and compute weights (the `void*` arguments).
  virtual DType act_dtype() const { return DType::F32; }
  size_t act_size() const { return dtype_size(act_dtype()); }

  // ---- memory (host memory on the CPU backend) ----
  virtual void* alloc(size_t bytes) = 0;  // zero-initialised, 64-byte aligned
  virtual void release(void* p) = 0;
  // From now on an alloc() that would take the bytes in use beyond limit.bytes throws Error naming
  // the rank, the device, the bytes asked and the limit. The CPU backend counts every alloc() (the
  // CNN ops' oneDNN scratch is not counted); the CUDA backend every byte of its arena (the cuBLAS,
  // cuBLASLt and cuDNN workspaces included; not the CUDA context nor NCCL's buffers) and takes the
  // smaller of the limit and the device's memory; other backends refuse a limit (Error).
  virtual void set_memory_limit(const MemoryLimit& limit);
  // The host buffer may be reused when to_device returns; the copy is ordered before later ops
  // (it may still be in flight: no synchronisation is implied). to_host returns with the data.
  virtual void to_device(void* dst, const void* src_host, size_t bytes) = 0;
  virtual void to_host(void* dst_host, const void* src, size_t bytes) = 0;
  virtual void zero_bytes(void* x, size_t bytes) = 0;
  virtual void copy_bytes(void* dst, const void* src, size_t bytes) = 0;
  void zero(float* x, size_t n) { zero_bytes(x, n * sizeof(float)); }
  void copy(float* dst, const float* src, size_t n) { copy_bytes(dst, src, n * sizeof(float)); }
  // n elements of act_dtype().
  void zero_act(void* x, size_t n) { zero_bytes(x, n * act_size()); }
  void copy_act(void* dst, const void* src, size_t n) { copy_bytes(dst, src, n * act_size()); }
  // dst[i] = src[i] converted (F32 <-> BF16, or a copy when the types are equal), both in backend
  // memory. fp32 -> bf16 rounds to nearest even.
  virtual void cast(void* dst, DType dst_type, const void* src, DType src_type, size_t n) = 0;
  virtual void scale(float* x, float s, size_t n) = 0;
  virtual void add(float* dst, const float* src, size_t n) = 0;  // dst += src
  virtual double sum_squares(const float* x, size_t n) = 0;     // in double, for grad norms
  // Σ over the spans (offset, n) of x of sum_squares(x + offset, n), added in span order — the same
  // value as those calls — with one synchronisation for all of them on a device (a gradient norm
  // reads ~150 tensors a step).
  virtual double sum_squares_spans(const float* x, const std::vector<std::pair<size_t, size_t>>& spans) {
    double s = 0;
    for (const auto& [offset, n] : spans) s += sum_squares(x + offset, n);
    return s;
  }
  // acc[0] += sum of x[0..n) in double, in a fixed order; acc is one double in backend memory.
  // Losses are summed on the device so a step reads them once, not after every micro-batch.
  virtual void accumulate_sum(double* acc, const float* x, size_t n) = 0;
  virtual void synchronize() {}
  // Device memory as the backend sees it (GPU: peak in use, reserved, allocation calls); empty on
  // host backends. The trainer logs it after the first step, when every buffer exists.
  virtual std::string memory_summary() const { return {}; }
  // What the backend's libraries chose, for benchmarks (CUDA: cuBLASLt's heuristic queries, cached
  // plans and the epilogues that ran as a separate kernel); empty when there is nothing to say.
  virtual std::string kernel_summary() const { return {}; }
  // The stream the ops run on (a cudaStream_t on the CUDA backend; null on the CPU), for
  // communicators that order themselves against compute (dist/device_comm.h).
  virtual void* native_stream() const { return nullptr; }
  // The op-time table (backend/op_timed_backend.h) times spans of this backend's work with a
  // clock of its own: the wall clock on host backends (their ops return when done), events on
  // a GPU's stream (no synchronisation per op).
  class OpClock {
   public:
    virtual ~OpClock() = default;
    virtual void start() = 0;  // right before an op
    virtual void stop() = 0;   // right after it
    // Milliseconds of every start/stop pair since the last call, in order (may synchronise).
    virtual std::vector<double> take() = 0;
  };
  virtual std::unique_ptr<OpClock> make_op_clock();
  // The backend a decorator (OpTimedBackend) wraps; itself otherwise.
  virtual Backend& unwrapped() { return *this; }

  // ---- dense layers ----
  // out[N,OC] = inp[N,C] . weight[OC,C]^T + bias[OC]   (bias may be null)
  virtual void matmul_forward(void* out, const void* inp, const void* weight, const void* bias,
                              int N, int C, int OC) = 0;
  // The column-parallel linear of the MLP followed by GELU: pre[N,OC] = inp . weight^T + bias,
  // out = gelu(pre) (one GEMM with a GELU epilogue where the backend has one).
  virtual void matmul_gelu_forward(void* pre, void* out, const void* inp, const void* weight,
                                   const void* bias, int N, int C, int OC) {
    matmul_forward(pre, inp, weight, bias, N, C, OC);
    gelu_forward(out, pre, size_t(N) * OC);
  }
  // dinp[N,C] (= or +=, accumulate_dinp) dout[N,OC] . weight[OC,C];  dweight[OC,C] (+= or =,
  // accumulate_dweight) dout^T . inp;  dbias[OC] likewise sum_n dout. With accumulate_dweight false
  // the parameter gradients are written, their old contents never read (the first micro-batch of an
  // update: no zeroing pass, no read of the old values) — the bits of += onto zeros, but for the sign
  // of an exact zero. Each of dinp, dweight, dbias may be null: that gradient is skipped
  // and the others are computed exactly as with all three (zero bubble, Qi et al. §2: the input
  // part calls with dweight = dbias = null, the deferred weight part with dinp = null; both
  // together must equal the fused call bit for bit). `weight` is unused when dinp is null and
  // `inp` when dweight is null.
  virtual void matmul_backward(void* dinp, float* dweight, float* dbias, const void* dout,
                               const void* inp, const void* weight, int N, int C, int OC,
                               bool accumulate_dinp, bool accumulate_dweight) = 0;
  // matmul_backward (accumulate_dinp = false) whose input gradient then goes through the backward
  // of the GELU that produced `inp` from `pre`: dpre[N,C] = gelu'(pre) * (dout . weight) (one GEMM
  // with a dGELU epilogue where the backend has one). dpre, dweight, dbias nullable as above.
  virtual void matmul_backward_gelu(void* dpre, float* dweight, float* dbias, const void* dout,
                                    const void* inp, const void* weight, const void* pre, int N,
                                    int C, int OC, bool accumulate_dweight) {
    matmul_backward(dpre, dweight, dbias, dout, inp, weight, N, C, OC, false, accumulate_dweight);
    if (dpre) gelu_backward(dpre, pre, dpre, size_t(N) * C);
  }

  // ---- normalisation ----
  // out[N,C] = (inp - mean) * rstd * weight + bias; saves mean[N], rstd[N]. eps = 1e-5.
  virtual void layernorm_forward(void* out, float* mean, float* rstd, const void* inp,
                                 const void* weight, const void* bias, int N, int C) = 0;
  // dinp[N,C] = dres + the input gradient; dweight[C] += ...; dbias[C] += ...
  // dres is the residual stream's gradient that the layernorm's joins (one pass instead of a copy
  // and an accumulation): dres == dinp accumulates in place, null adds to zero (0 + g, the bits
  // of zeroing dinp first); dres must not overlap dinp otherwise.
  // Each of dinp, dweight, dbias may be null (skipped), the others computed exactly as in the
  // fused call (zero bubble's input / weight split; split calls == fused call bit for bit).
  // `weight` and `dres` are unused when dinp is null.
  virtual void layernorm_backward(void* dinp, const void* dres, float* dweight, float* dbias,
                                  const void* dout, const void* inp, const void* weight,
                                  const float* mean, const float* rstd, int N, int C) = 0;
  // Fused residual add + layernorm: residual = a + b (stored, rounded); out = layernorm of the
  // stored residual.
  virtual void residual_layernorm_forward(void* residual, void* out, float* mean, float* rstd,
                                          const void* a, const void* b, const void* weight,
                                          const void* bias, int N, int C) = 0;
  virtual void residual_forward(void* out, const void* a, const void* b, size_t n) = 0;

  // ---- activations ----
  // GELU, tanh approximation (GPT-2).
  virtual void gelu_forward(void* out, const void* inp, size_t n) = 0;
  // dinp = gelu'(inp) * dout   (overwrites dinp; dinp may equal dout)
  virtual void gelu_backward(void* dinp, const void* inp, const void* dout, size_t n) = 0;

  // ---- causal self-attention core ----
  // qkv[B,T,3C]: per token q[C] | k[C] | v[C], head h at columns h*HS..(h+1)*HS of each.
  // out[B,T,C] = softmax(q k^T / sqrt(HS) + causal mask) v, heads concatenated.
  // state[attention_state_floats] receives what the backward needs besides qkv and out: the
  // backend's choice — the softmax probabilities att[B,NH,T,T] (materialised attention; upper
  // triangle 0) or the per-row logsumexp lse[B,NH,T] (flash attention, which never forms T×T).
  virtual size_t attention_state_floats(int B, int T, int C, int NH) const {
    (void)C;
    return size_t(B) * NH * T * T;
  }
  virtual void attention_forward(void* out, float* state, const void* qkv, int B, int T, int C,
                                 int NH) = 0;
  // dqkv[B,T,3C] = gradient w.r.t. qkv (overwritten). `out` is the forward's output.
  virtual void attention_backward(void* dqkv, const void* dout, const void* out, const void* qkv,
                                  const float* state, int B, int T, int C, int NH) = 0;

  // ---- embeddings ----
  // Vocab-parallel aware: this rank holds rows [vocab_start, vocab_start + vocab_rows) of the
  // token table in wte[vocab_rows,C].
  // out[B,T,C] = (token in range ? wte[token - vocab_start, :] : 0) + (wpe ? wpe[t, :] : 0)
  virtual void embedding_forward(void* out, const int32_t* tokens, const void* wte,
                                 const void* wpe, int B, int T, int C, int vocab_start,
                                 int vocab_rows) = 0;
  // dwte[vocab_rows,C] += scatter of dout by in-range token; dwpe[T,C] += sum over b (skipped
  // when null). Deterministic. `tokens_host` (nullable): the same tokens in host memory, when the
  // caller has them — a GPU backend that buckets tokens on the host then needs no device-to-host
  // copy (and no synchronisation).
  virtual void embedding_backward(float* dwte, float* dwpe, const void* dout,
                                  const int32_t* tokens, const int32_t* tokens_host, int B, int T,
                                  int C, int vocab_start, int vocab_rows) = 0;

  // ---- classifier ----
  // Fused softmax + cross-entropy over logits[N,Vp] of which the first V columns are real.
  // losses[N] = -log softmax(logits[n, :V])[targets[n]].
  // If dlogits is not null: dlogits[n,:V] = (softmax - onehot(target)) * dloss, dlogits[n,V:] = 0.
  // dlogits may alias logits (in place). Targets < 0 are ignored (loss 0, gradient 0).
  virtual void softmax_cross_entropy(float* losses, void* dlogits, const void* logits,
                                     const int32_t* targets, int N, int V, int Vp,
                                     float dloss) = 0;

  // Vocab-parallel classifier (Megatron): the caller holds logits[N,Vl] for global vocabulary ids
  // vocab_start + j, of which the first V_local columns are real (the rest padding), and combines
  // the per-rank statistics with collectives between the passes, never gathering the logits:
  //   1. logits_row_max -> all-reduce MAX        2. logits_sumexp_target -> all-reduce SUM
  //   3. cross_entropy_finish (losses, and the logits gradient in place when dlogits != null).
  // maxv[N]: row max over real local columns (-inf when V_local = 0).
  virtual void logits_row_max(float* maxv, const void* logits, int N, int V_local, int Vl) = 0;
  // With the global max: sumexp[N] = sum_j exp(l[n,j] - maxv[n]) over real local columns;
  // target_logit[N] = l[n, target - vocab_start] if the target is in this shard, else 0.
  virtual void logits_sumexp_target(float* sumexp, float* target_logit, const void* logits,
                                    const float* maxv, const int32_t* targets, int N, int V_local,
                                    int Vl, int vocab_start) = 0;
  // losses[N] = log(sumexp) + maxv - target_logit (0 for targets < 0); dlogits (may alias logits):
  // (exp(l - maxv) / sumexp - [vocab_start + j == target]) * dloss on real columns, 0 on padding.
  virtual void cross_entropy_finish(float* losses, void* dlogits, const void* logits,
                                    const float* maxv, const float* sumexp,
                                    const float* target_logit, const int32_t* targets, int N,
                                    int V_local, int Vl, int vocab_start, float dloss) = 0;

  // ---- convolutional networks (activations in act_dtype(); statistics fp32) ----
  // A backend without them cannot train a CNN: the defaults throw an Error naming the backend.
  // CNN activations are [N, C, H, W] tensors stored in the backend's image layout: NCHW, or NHWC
  // (channels last), whichever its kernels run fastest on — the CPU's oneDNN kernels read NHWC
  // without reorders, cuDNN's legacy API here is NCHW. Elementwise ops do not care; layers convert
  // where the layout shows: the input images (fp32 NCHW) and a feature map flattened into a fully
  // connected layer (torchvision flattens in C·H·W order). Shapes below are logical (N, C, H, W).
  enum class ImageLayout : uint8_t { NCHW, NHWC };
  virtual ImageLayout image_layout() const { return ImageLayout::NCHW; }
  // dst (act dtype, image layout) ← fp32 NCHW images.
  virtual void images_to_activations(void* dst, const float* images, int N, int C, int H, int W);
  // Between the image layout and NCHW, both in the act dtype (dst and src do not alias).
  virtual void activations_to_nchw(void* dst, const void* src, int N, int C, int H, int W);
  virtual void nchw_to_activations(void* dst, const void* src, int N, int C, int H, int W);
  // y[N,K,P,Q] = conv(x, w) + bias (bias may be null).
  virtual void conv2d_forward(void* y, const void* x, const void* w, const void* bias, const Conv2d& c);
  // dx (overwritten; null: skipped) = the gradient w.r.t. x; dw[K,C,R,S] += and db[K] += the
  // gradients w.r.t. w and bias (each nullable: skipped).
  virtual void conv2d_backward(void* dx, float* dw, float* db, const void* dy, const void* x,
                               const void* w, const Conv2d& c);
  // Batch normalization per channel over (N, HW): training — mean[C] and var[C] receive the batch
  // mean and (biased) variance and y = (x − mean) / sqrt(var + eps) · gamma + beta; inference
  // (training = false) — mean and var are read (the running statistics).
  virtual void batchnorm_forward(void* y, float* mean, float* var, const void* x, const void* gamma,
                                 const void* beta, int N, int C, int HW, float eps, bool training);
  // Training batch norm's backward: dx overwritten, dgamma[C] += and dbeta[C] += (nullable).
  virtual void batchnorm_backward(void* dx, float* dgamma, float* dbeta, const void* dy, const void* x,
                                  const float* mean, const float* var, const void* gamma, int N, int C,
                                  int HW, float eps);
  // y = max(x, 0) with NaN kept (PyTorch's relu: a diverged run stays visibly NaN); dx = dy · (y > 0),
  // so a NaN's gradient is 0 (dx may alias dy).
  virtual void relu_forward(void* y, const void* x, size_t n);
  virtual void relu_backward(void* dx, const void* y, const void* dy, size_t n);
  // Batch norm, then + residual (nullable; [N,C,HW] like y), then ReLU: y = max(bn(x) [+ residual],
  // 0), the result of batchnorm_forward, residual_forward and relu_forward in turn (the default
  // runs them) in fewer passes over memory where a backend fuses them (the CPU in fp32).
  virtual void batchnorm_relu_forward(void* y, float* mean, float* var, const void* x, const void* gamma,
                                      const void* beta, const void* residual, int N, int C, int HW, float eps,
                                      bool training);
  // Training backward of y = max(bn(x), 0) (no residual): dx = batchnorm_backward of dy · (y > 0),
  // dgamma and dbeta += (nullable). The default writes dy · (y > 0) to `scratch` (N·C·HW
  // activations) first; a fusing backend may instead recompute y from x, mean, var, gamma and beta
  // (the forward's y exactly) and leave scratch alone.
  virtual void relu_batchnorm_backward(void* dx, float* dgamma, float* dbeta, const void* dy, const void* y,
                                       const void* x, const float* mean, const float* var, const void* gamma,
                                       const void* beta, int N, int C, int HW, float eps, void* scratch);
  // Bytes of the state a pooling forward keeps for its backward (max pooling's argmax).
  virtual size_t pool2d_workspace_bytes(const Pool2d& p) const;
  virtual void pool2d_forward(void* y, void* workspace, const void* x, const Pool2d& p);
  // dx (overwritten) from dy and the forward's workspace.
  virtual void pool2d_backward(void* dx, const void* dy, const void* workspace, const Pool2d& p);
  // y = a·x + b·y, fp32 (batch norm's running statistics).
  virtual void axpby(float* y, float a, const float* x, float b, size_t n);

  // Inverted dropout over `rows` sample rows of `row_elems` activations: y = x / (1 − p) where
  // dropout_keep(seed, first_row + r, j, dropout_threshold(p)) (core/dropout_mask.h), else 0. The
  // backward is the same call on the gradients. y may alias x.
  virtual void dropout(void* y, const void* x, int rows, int row_elems, float p, uint64_t seed,
                       int64_t first_row);
  // Top-1 / top-5 hits of a classifier over logits[N, ld] (the first V columns real): hits1[n] = 1
  // when no class scores higher than the target (a tie counts for the target), hits5[n] = 1 when
  // fewer than five do; 0 otherwise and for targets < 0.
  virtual void classification_hits(float* hits1, float* hits5, const void* logits,
                                   const int32_t* targets, int N, int V, int ld);

  // ---- optimizer ----
  virtual void adamw_step(float* param, const float* grad, float* m, float* v, size_t n,
                          const AdamWArgs& args) = 0;
  // adamw_step for every segment (args = base with the segment's weight_decay), the same bits as
  // those calls; segments must not overlap. A device does it in one launch (~150 tensors a step).
  virtual void adamw_step_segments(float* params, const float* grads, float* m, float* v,
                                   const std::vector<AdamWSegment>& segments, const AdamWArgs& base) {
    AdamWArgs a = base;
    for (const AdamWSegment& s : segments) {
      a.weight_decay = s.weight_decay;
      adamw_step(params + s.flat, grads + s.flat, m + s.state, v + s.state, s.n, a);
    }
  }
  // `buf`: the momentum buffer (may be null when momentum is 0).
  virtual void sgd_step(float* param, const float* grad, float* buf, size_t n, const SgdArgs& args) = 0;
};

// How the CPU backend computes with act = BF16. EMULATED: every op widens its bf16 arguments, runs
// the fp32 reference op and rounds its outputs once (the CUDA bf16 kernels' rounding points; the
// reference the GPU tests compare against). NATIVE: matmuls and convolutions run in bf16 with fp32
// accumulation through oneDNN (needs avx512_bf16 or amx_bf16; the other ops as EMULATED, with the
// same rounding points). AUTO: NATIVE where the CPU has bf16 dot products, else EMULATED.
enum class CpuBf16 { AUTO, NATIVE, EMULATED };
// "auto" | "native" | "emulated" (Error with a hint otherwise; `what` names the setting).
CpuBf16 parse_cpu_bf16(const std::string& s, const std::string& what);

// The fp32 reference backend (OpenBLAS + OpenMP). With act = BF16 it computes in mixed precision:
// activations and compute weights stored as bf16, fp32 where the ops accumulate, as `bf16` says
// (emulated by default, so the whole mixed-precision path — casts, bf16 collectives, loss curves —
// is testable without a GPU and bit-reproducible). NATIVE on a CPU without bf16 throws baton::Error.
std::unique_ptr<Backend> make_cpu_backend(DType act = DType::F32, CpuBf16 bf16 = CpuBf16::EMULATED);

}  // namespace baton
