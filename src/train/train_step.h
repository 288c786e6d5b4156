// One optimizer step of a data- and tensor-parallel GPT: the micro-batches of this rank's slice of
// the global batch (forward, backward, bucketed gradient reduction overlapped with the last
// backward), sequence-parallel gradient sums, global-norm clipping, AdamW on this rank's segments,
// and the ZeRO-1 parameter all-gather. Shared by the trainer and the layout-invariance tests so
// both run exactly the same step.
#pragma once
#include <cstdint>
#include <functional>

#include "dist/comm.h"
#include "model/gpt_model.h"
#include "optim/adamw.h"
#include "optim/data_parallel.h"

namespace baton {

// Writes rows [row, row + rows) of the global batch of `step`: inputs and targets [rows, T].
using BatchRows = std::function<void(int64_t step, int row, int rows, int32_t* x, int32_t* y)>;

struct StepSetup {
  GptModel* model = nullptr;
  AdamW* optimizer = nullptr;
  DataParallelGrads* grads = nullptr;
  dist::Comm* tp = nullptr;  // null = no tensor parallelism
  dist::Comm* dp = nullptr;  // null = no data parallelism
  int dp_rank = 0;
  int global_batch = 1;  // sequences per step over all data-parallel ranks
  int micro_batch = 1;
  int seq_len = 1;
  double grad_clip = 0;
};

struct StepResult {
  double loss = 0;       // mean over the global batch's tokens
  double grad_norm = 0;  // before clipping
  float clip_scale = 1;
};

StepResult train_step(const StepSetup& s, const BatchRows& batch, int64_t step, double lr);

}  // namespace baton
