// The one training loop of `baton train`, for every layout: data -> the session's step (the
// schedule's program through the executor: micro-batches with gradient accumulation, bucketed
// data-parallel reduction, tensor-parallel model, global-norm clipping, the optimizer) -> LR
// schedule -> loss guard, metrics, evaluation and HDF5 checkpoints (every checkpoint.every steps,
// at the end and on SIGINT/SIGTERM; resume per checkpoint.resume, continuing bit-identically),
// with a stall watchdog, an output preflight and run.trace. What differs between homogeneous
// training, HetPipe's wave all-reduce and WSP between virtual workers is a cross-group strategy it
// calls at its points (train/loop/cross_group_sync.h), never a branch here.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "data/tokenizer.h"
#include "dist/comm.h"
#include "model/model_builder.h"
#include "train/loop/batch_source.h"
#include "train/loop/cross_group_sync.h"
#include "train/observe/divergence_guard.h"

namespace baton {

struct TrainSummary {
  int64_t steps_done = 0;       // optimizer steps completed in this run
  int64_t last_step = 0;        // index of the last completed step + 1
  double last_loss = 0;
  std::optional<double> last_val_loss;
  std::vector<std::pair<std::string, double>> last_val_metrics;  // "top1", "top5" of a CNN
  bool stopped_by_signal = false;
  std::string checkpoint_path;  // the last checkpoint written by this run, if any
};

// What `baton train` builds from a config before the session: the tokenizer (data.tokenizer, if
// any), the model (its vocabulary from the tokenizer when model.vocab_size = 0) and the batch
// source (token or image datasets). Throws baton::Error for a config this build cannot train or
// datasets that are missing, damaged or do not fit the model.
struct ModelAndData {
  std::unique_ptr<Tokenizer> tokenizer;
  std::shared_ptr<const ModelBuilder> builder;
  std::unique_ptr<BatchSource> data;
};
ModelAndData model_and_data(const Config& cfg);

// The divergence guard's rules of a config (train.spike_*; the uniform guess of the model's
// vocabulary or classes).
DivergenceRules divergence_rules(const Config& cfg, const ModelBuilder& builder);

// Runs the configured training on this rank. `world`: every rank of the job; `make_sync` the
// cross-group strategy of the config's layout (make_lockstep_sync for homogeneous layouts,
// make_virtual_worker_sync for virtual workers). Throws baton::Error for bad input (datasets,
// tokenizer, layout, ...).
TrainSummary train(const Config& cfg, dist::Comm& world, const SyncFactory& make_sync);

}  // namespace baton
