// Metrics (DESIGN §6): one JSON object per logged step in <run.dir>/metrics.jsonl with step, loss,
// lr, grad_norm, step_ms, tokens_per_s, tflops_per_gpu, mfu (and val_loss on eval steps), plus the
// model FLOPs come from the model (ModelBuilder::flops_per_step; a GPT's in model/gpt.h).
#pragma once
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace baton {

// A virtual worker's state at a logged minibatch (docs/hetpipe.md "Metrics"). Waiting is not
// idling: a WSP pull is requested at a wave's push and may return while the VW keeps running the
// next wave's first s_local minibatches; only the time the VW was blocked counts as idle.
struct VwMetrics {
  int vw = 0;
  int clock = 0;            // c_local after the minibatch
  int c_global = 0;         // waves every VW had pushed at the VW's last pull
  int staleness = 0;        // (p − 1) − the newest minibatch index all VWs' updates reach in p's weights
  double wait_s = 0;        // seconds from the request of the pull that returned before this minibatch to its return
  double wait_total_s = 0;  // since the run started
  double push_s = 0;        // seconds spent pushing after this minibatch
  double idle_s = 0;        // seconds the rank was blocked on the server (or the all-reduce) before/after it
  double idle_total_s = 0;  // since the run started
  double minibatches_per_s = 0;  // the VW's minibatches so far / seconds since its loop started
  double slowdown = 1;      // the factor this minibatch's compute was stretched by (train/hetero/compute_stretch.h)
  double stretch_s = 0;     // seconds slept to stretch it
};

struct StepMetrics {
  int64_t step = 0;
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  double step_ms = 0;
  double tokens_per_s = 0;
  double tflops_per_gpu = 0;
  std::optional<double> mfu;  // absent when the device's peak is unknown
  std::optional<double> comm_share;  // seconds blocked in communication / step seconds; with several ranks
  std::optional<double> val_loss;
  // Image models: images/s (= tokens_per_s, one "token" per image) and the evaluation metrics as
  // "val_<name>" (val_top1, val_top5: fractions in [0, 1]).
  std::optional<double> images_per_s;
  std::vector<std::pair<std::string, double>> val_metrics;
  // The first step after a resume with changed settings: key -> (old, new) as TOML text.
  std::vector<std::pair<std::string, std::pair<std::string, std::string>>> resumed_changes;
  std::optional<VwMetrics> vw;  // WSP runs
  // train.on_spike = "rewind": this run's rewinds and the data batches all rewinds skipped (the
  // checkpoints carry the latter); written when either is > 0.
  int rewinds = 0;
  int64_t batches_skipped = 0;
};

// Drops the records of steps after `step` (and a torn last record) from the metrics file `path`,
// so that a resumed run's records follow the checkpoint's step once. Throws Error on a full disk.
void truncate_metrics_after(const std::string& path, int64_t step);

class TensorBoardWriter;

class MetricsWriter {
 public:
  // Appends to <dir>/<name> when `append`, else truncates. No-op writer if dir is empty.
  MetricsWriter(const std::string& dir, bool append, const std::string& name = "metrics.jsonl");
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  void write(const StepMetrics& m);
  // Drops the records after `step` (a rewind to that step's checkpoint) and appends from there.
  void rewind_to(int64_t step);
  const std::string& path() const { return path_; }
  // run.tensorboard: every record written (and every rewind) goes to `tensorboard` too.
  void also_to(std::unique_ptr<TensorBoardWriter> tensorboard);
  const TensorBoardWriter* tensorboard() const { return tensorboard_.get(); }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

}  // namespace baton
