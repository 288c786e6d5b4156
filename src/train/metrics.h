// Metrics (DESIGN §6): one JSON object per logged step in <run.dir>/metrics.jsonl with step, loss,
// lr, grad_norm, step_ms, tokens_per_s, tflops_per_gpu, mfu (and val_loss on eval steps), plus the
// model-FLOPs formula of PTD-P used for tflops and MFU.
#pragma once
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

namespace baton {

struct StepMetrics {
  int64_t step = 0;
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  double step_ms = 0;
  double tokens_per_s = 0;
  double tflops_per_gpu = 0;
  std::optional<double> mfu;  // absent when the device's peak is unknown
  std::optional<double> val_loss;
};

// Model FLOPs of one optimizer step for a GPT (PTD-P, Narayanan et al. eq. in notes-dissertation):
// F = 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)), B = sequences per step (global batch), s = seq_len,
// l = layers, h = d_model, V = vocabulary (padded, as computed).
double gpt_model_flops_per_step(int64_t global_batch, int seq_len, int n_layer, int d_model,
                                int vocab);
// Hardware FLOPs with full recomputation: 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)).
double gpt_hardware_flops_full_recompute(int64_t global_batch, int seq_len, int n_layer,
                                         int d_model, int vocab);

class MetricsWriter {
 public:
  // Appends to <dir>/metrics.jsonl when `append`, else truncates. No-op writer if dir is empty.
  MetricsWriter(const std::string& dir, bool append);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  void write(const StepMetrics& m);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace baton
