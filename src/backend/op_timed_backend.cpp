// OpTimedBackend and the wall-clock OpClock; see op_timed_backend.h.
#include "backend/op_timed_backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string_view>

#include "core/error.h"

namespace baton {
namespace {

// Host backends: an op has finished when its call returns.
class WallClock final : public Backend::OpClock {
 public:
  void start() override { t0_ = std::chrono::steady_clock::now(); }
  void stop() override {
    ms_.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count());
  }
  std::vector<double> take() override { return std::exchange(ms_, {}); }

 private:
  std::chrono::steady_clock::time_point t0_;
  std::vector<double> ms_;
};

// Spans held before the clock is asked for them (bounds a GPU clock's events in flight).
constexpr size_t kMaxPending = 4096;

constexpr std::string_view kOpNames[] = {"to_device",
                                         "to_host",
                                         "zero_bytes",
                                         "copy_bytes",
                                         "cast",
                                         "scale",
                                         "add",
                                         "sum_squares",
                                         "sum_squares_spans",
                                         "accumulate_sum",
                                         "matmul_forward",
                                         "matmul_gelu_forward",
                                         "matmul_backward",
                                         "matmul_backward_gelu",
                                         "layernorm_forward",
                                         "layernorm_backward",
                                         "residual_layernorm_forward",
                                         "residual_forward",
                                         "gelu_forward",
                                         "gelu_backward",
                                         "attention_forward",
                                         "attention_backward",
                                         "embedding_forward",
                                         "embedding_backward",
                                         "softmax_cross_entropy",
                                         "logits_row_max",
                                         "logits_sumexp_target",
                                         "cross_entropy_finish",
                                         "images_to_activations",
                                         "activations_to_nchw",
                                         "nchw_to_activations",
                                         "conv2d_forward",
                                         "conv2d_backward",
                                         "batchnorm_forward",
                                         "batchnorm_backward",
                                         "relu_forward",
                                         "relu_backward",
                                         "batchnorm_relu_forward",
                                         "relu_batchnorm_backward",
                                         "pool2d_forward",
                                         "pool2d_backward",
                                         "axpby",
                                         "dropout",
                                         "classification_hits",
                                         "adamw_step",
                                         "adamw_step_segments",
                                         "sgd_step"};
static_assert(std::size(kOpNames) == size_t(OpTimedBackend::Op::kCount), "one name per op");

}  // namespace

std::unique_ptr<Backend::OpClock> Backend::make_op_clock() { return std::make_unique<WallClock>(); }

bool op_times_requested() {
  const char* v = std::getenv("BATON_OP_TIMES");
  if (v == nullptr || std::string_view(v).empty() || std::string_view(v) == "0") return false;
  BATON_REQUIRE(std::string_view(v) == "1", fmt::format("BATON_OP_TIMES={} is not 0 or 1", v),
                "BATON_OP_TIMES=1 prints the op-time table (calls, ms, TFLOP/s or GB/s per op kind)");
  return true;
}

OpTimedBackend::OpTimedBackend(std::unique_ptr<Backend> inner)
    : inner_(std::move(inner)), clock_(inner_->make_op_clock()), totals_(size_t(Op::kCount)) {
  for (size_t i = 0; i < totals_.size(); ++i) totals_[i].op = kOpNames[i];
  pending_.reserve(kMaxPending);
}

OpTimedBackend::Span::Span(OpTimedBackend& b, Op op, double flops, double bytes)
    : b_(b), op_(op), flops_(flops), bytes_(bytes) {
  b_.clock_->start();
}

OpTimedBackend::Span::~Span() {
  b_.clock_->stop();
  b_.pending_.push_back({op_, flops_, bytes_});
  if (b_.pending_.size() >= kMaxPending) b_.collect();
}

void OpTimedBackend::collect() {
  const std::vector<double> ms = clock_->take();
  BATON_ASSERT(ms.size() == pending_.size(), "op clock returned {} spans for {} ops", ms.size(), pending_.size());
  for (size_t i = 0; i < ms.size(); ++i) {
    Row& r = totals_[size_t(pending_[i].op)];
    r.calls++;
    r.ms += ms[i];
    r.flops += pending_[i].flops;
    r.bytes += pending_[i].bytes;
  }
  pending_.clear();
}

void OpTimedBackend::reset() {
  collect();
  for (Row& r : totals_) r.calls = 0, r.ms = r.flops = r.bytes = 0;
}

std::vector<OpTimedBackend::Row> OpTimedBackend::rows() {
  collect();
  std::vector<Row> out;
  for (const Row& r : totals_)
    if (r.calls > 0) out.push_back(r);
  std::stable_sort(out.begin(), out.end(), [](const Row& a, const Row& b) { return a.ms > b.ms; });
  return out;
}

std::string OpTimedBackend::table(const std::vector<Row>& rows, double step_ms, int steps) {
  BATON_ASSERT(steps > 0 && step_ms > 0, "op-time table over {} steps of {} ms", steps, step_ms);
  const double per = 1.0 / steps;
  std::string t = fmt::format("{:<28} {:>9} {:>10} {:>7} {:>9} {:>9}\n", "op (per step)", "calls", "ms", "share",
                              "TFLOP/s", "GB/s");
  double ops_ms = 0;
  for (const Row& r : rows) {
    ops_ms += r.ms;
    const double s = r.ms / 1e3;
    const std::string tflops = r.flops > 0 && s > 0 ? fmt::format("{:.3f}", r.flops / s / 1e12) : "-";
    const std::string gbs = r.flops == 0 && r.bytes > 0 && s > 0 ? fmt::format("{:.1f}", r.bytes / s / 1e9) : "-";
    t += fmt::format("{:<28} {:>9.1f} {:>10.3f} {:>6.1f}% {:>9} {:>9}\n", r.op, r.calls * per, r.ms * per,
                     100 * r.ms / step_ms, tflops, gbs);
  }
  t += fmt::format("{:<28} {:>9} {:>10.3f} {:>6.1f}%\n", "all ops", "", ops_ms * per, 100 * ops_ms / step_ms);
  t += fmt::format("{:<28} {:>9} {:>10.3f} {:>6.1f}%", "rest of the step", "", (step_ms - ops_ms) * per,
                   100 * (step_ms - ops_ms) / step_ms);
  return t;
}

}  // namespace baton
