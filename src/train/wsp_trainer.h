// `baton train` under hetero.sync = "wsp" with virtual workers (VWs) of one stage each: every rank
// is one VW that trains the whole model on its own minibatches and stays in sync with the others
// through the WSP parameter server (HetPipe §5; docs/hetpipe.md "Training with WSP").
//
// Per VW, minibatch p (1-based; the session's step p − 1):
// - data: VW k's minibatch p is rows [k·b, (k+1)·b) of global batch p − 1, b = train.global_batch / N
//   — exactly data-parallel rank k's slice of step p − 1, so N VWs with D = 0, Nm = 1 and plain SGD
//   at lr / N reproduce data parallelism (the reduction);
// - the optimizer step is local (its state, e.g. AdamW's moments, stays in the VW); its effect on
//   the weights, u_p = w_after − w_before, is the update the VW accumulates into the wave's ũ;
// - wsp::WorkerClock decides when to push (end of each wave: w_global += ũ on the server) and when
//   to pull (end of clock c ≥ D, waiting for every VW's wave c − D); a returned pull sets
//   w_local = w_global + the partial wave ũ_partial (the merge rule, wsp/worker_clock.h).
// One stage runs one minibatch at a time, so each starts on the latest w_local (everything the VW
// finished); the Nm weight copies of a pipelined VW (§4) are not needed here.
//
// hetero.sync = "allreduce" (HetPipe's synchronous, Horovod-like baseline) runs the same VWs, data
// split and waves of Nm minibatches without a parameter server: at the end of every wave each VW's
// wave update ũ_k = w_end_k − w_start (its optimizer's deltas over the wave) is all-reduced and
// every VW sets w = w_start + Σ_k ũ_k / N, so all VWs hold the same weights after each wave
// (staleness 0 between waves). With Nm = 1 and plain SGD it is data parallelism at the same lr.
//
// Either mode may emulate a heterogeneous cluster on one machine (config/device_emulation.h): each
// minibatch's compute is stretched by the rank's slowdown (train/compute_stretch.h) and its backend
// refuses memory beyond the rank's limit; the metrics report per VW its minibatches/s, the time
// waiting for the server (request to return) and the part of it spent blocked (idle).
#pragma once
#include "config/config.h"
#include "dist/comm.h"
#include "train/trainer.h"

namespace baton {

// Collective over `world` (the parameter server's windows, or the allreduce of every wave); each
// rank trains its VW. Rank 0's VW
// logs and writes <run.dir>/metrics.jsonl, VW k > 0 writes <run.dir>/metrics-vw<k>.jsonl.
TrainSummary train_wsp(const Config& cfg, dist::Comm& world);

}  // namespace baton
