// The training loop of one process: data -> model forward/backward over the micro-batches of a
// step (gradient accumulation) -> global-norm clipping -> AdamW -> LR schedule -> metrics,
// evaluation and HDF5 checkpoints (every checkpoint.every steps, at the end and on SIGINT/SIGTERM;
// resume per checkpoint.resume, continuing bit-identically). Multi-rank layouts (tp/dp/pp) arrive
// with later issues and plug in through the layout, schedule and Comm, not through flags here.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>

#include "config/config.h"

namespace baton {

struct TrainSummary {
  int64_t steps_done = 0;       // optimizer steps completed in this run
  int64_t last_step = 0;        // index of the last completed step + 1
  double last_loss = 0;
  std::optional<double> last_val_loss;
  bool stopped_by_signal = false;
  std::string checkpoint_path;  // the last checkpoint written by this run, if any
};

// Runs the configured training. Throws baton::Error for bad input (datasets, tokenizer, ...).
TrainSummary train(const Config& cfg);

}  // namespace baton
