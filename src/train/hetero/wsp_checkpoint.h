// Checkpoints of virtual-worker runs (issue 13 item 6; docs/hetpipe.md "Checkpoints and elastic
// resume"), under WSP and the wave all-reduce, for virtual workers (VWs) of one rank and of several
// stages (whose pipelines drain at each checkpoint step: the step runner's segments end at
// checkpoint.every, or at an agreed stop).
//
// A checkpoint is a synchronisation point of the whole job, taken at the end of a clock c ≥ D (a
// clock that pulls): every VW finishes its minibatch (c+1)·Nm and pushes wave c, all meet (so
// c_global = c + 1 and every wave is folded into w_global), each VW takes its outstanding pull
// (as of c + 1: no VW can push wave c + 1 before every VW has left the meeting) and merges it —
// with nothing of its own left unfolded, its weights become w_global exactly. Then every VW
// writes its own checkpoint (weights = w_global, its optimizer state) under <checkpoint dir>/vw<k>/
// (vw_checkpoint_dir, train/checkpoint/checkpoint_dir.h), and rank 0 publishes
// <checkpoint dir>/wsp-NNNNNNN.json (the step, the VWs, Nm, D) — the marker that the checkpoint is
// complete. A stop on a signal is such a meeting too (train/hetero/wsp_stage.h "Stopping").
//
// Resume (checkpoint.resume = "auto", or the checkpoint directory): the newest marker whose VWs'
// files all exist.
// - The same VWs (the same hetero.virtual_workers): each VW loads its own file — weights and
//   optimizer state — and the run continues at wave c + 1 with every VW's weights = w_global.
//   Where the WSP run itself does not depend on timing (D = 0 and Nm = 1 with two VWs: every
//   minibatch waits for the pull of every VW's previous one) the resumed run repeats the
//   uninterrupted one bit for bit (e2e test, VWs of one rank and of two stages).
// - A different set of VWs (a node lost: 3 VWs → 2, another grouping or other stage boundaries):
//   elastic restart from the global weights; every VW loads VW 0's file (each stage its layers) (the weights are w_global in every VW's file, and
//   VW 0's optimizer state is the one it continues with). The data position (the step) carries
//   over; each VW now takes global_batch / (new number of VWs) rows.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "dist/comm.h"

namespace baton {

// Whether the VW loops meet and checkpoint after step `step` (0-based): every checkpoint.every
// steps (a multiple of Nm: a wave's end) and at the run's end.
inline bool vw_checkpoint_after(const Config& cfg, int64_t step) {
  return (cfg.checkpoint.every > 0 && (step + 1) % cfg.checkpoint.every == 0) || step + 1 == cfg.train.steps;
}

// The VW list a checkpoint records: hetero.virtual_workers, or one entry per rank when empty.
std::vector<std::string> resolved_virtual_workers(const Config& cfg, int world_size);

struct WspResume {
  int64_t step = 0;      // the checkpoint's step (a wave's end)
  std::string path;      // the session checkpoint this VW loads
  bool elastic = false;  // the VWs differ from the checkpoint's
  int old_vws = 0;
};

// Where this VW resumes (nullopt: from scratch). Collective over `world`: every rank must see the
// same checkpoint (Error otherwise, naming both steps).
std::optional<WspResume> find_wsp_resume(const Config& cfg, dist::Comm& world, int vw);

// Logs where the run resumed (and, when elastic, from which file with how many VWs); `sync` names
// the mode ("WSP", "allreduce").
void log_wsp_resume(const WspResume& r, int num_vw, const char* sync = "WSP");

// Rank 0, once every VW has saved step `step`: publishes the marker (atomically) and prunes markers
// beyond checkpoint.keep.
void publish_wsp_checkpoint(const Config& cfg, int world_size, int64_t step);

}  // namespace baton
