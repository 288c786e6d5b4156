// Preflight before the first step: what would otherwise fail at the first save — hours in, or
// after all training when checkpoint.every = 0 — fails now with one clear error (issue 15, item 3):
// run.dir writable (rank 0, which writes the config and metrics), checkpoint.dir writable (every
// rank: checkpoints are written by all of them), and room in checkpoint.dir for a checkpoint of
// this model (rank 0; a warning when there is not room for checkpoint.keep + 1 of them, the most
// that coexist), and every rank that writes a checkpoint file with others seeing the directory its
// first rank writes in (a relative path in different working directories hung the first save).
// The datasets and tokenizer were opened by then on every rank. Collective.
#pragma once
#include "config/config.h"
#include "train/loop/session.h"

namespace baton {

void preflight_outputs(const Config& cfg, TrainSession& session);

}  // namespace baton
