// hetero.virtual_workers (DESIGN §6): the virtual workers of a HetPipe run, one entry per VW
// listing its pipeline stages in order, separated by commas. A stage is
//
//     RANK[@DEVICE][:FIRST-END]
//
// the rank that runs it, optionally the device it stands for (a name of the planner's device
// table, `baton plan --devices`; on CPU ranks it sets the rank's slowdown and memory limit, see
// docs/hetpipe.md) and optionally its global layers [FIRST, END). Either every stage of a VW names
// its layers (contiguous, from 0 to the model's layer count) or none does (the model's even split
// over the VW's stages). Examples: "0", "2,3", "0@V100:0-7, 1@P100:7-12". An empty list means one
// VW of one stage per rank. VW k is entry k; every rank of the job belongs to exactly one VW.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"

namespace baton {

struct VirtualWorkerStage {
  int rank = 0;
  std::string device;                 // "" = not given
  std::pair<int, int> layers{-1, -1};  // [first, end); {-1, -1} = not given
};

struct VirtualWorker {
  std::vector<VirtualWorkerStage> stages;
  std::vector<int> ranks() const;
  bool explicit_layers() const { return !stages.empty() && stages.front().layers.first >= 0; }
  // The stage boundaries for a model of `num_layers` global layers: the given ones (checked:
  // contiguous from 0 to num_layers, none empty) or empty (the model's even split). Throws Error.
  std::vector<std::vector<int>> layer_ranges(int num_layers, int index) const;
};

// Parses and checks hetero.virtual_workers. Throws Error (with a hint) for an entry that does not
// parse, a rank named twice, layers given for some stages of a VW only, and — when world_size > 0 —
// ranks outside [0, world_size) or left out. Empty list: one VW per rank (world_size of them).
std::vector<VirtualWorker> virtual_workers(const HeteroConfig& h, int world_size);

// Whether `baton train` runs virtual workers (train/hetero/virtual_worker_sync.h): hetero.sync = "wsp", or
// hetero.sync = "allreduce" (the synchronous baseline) with hetero.virtual_workers named or
// hetero.nm > 1. A [hetero] section at its defaults (sync = "allreduce" and nothing else, as every
// resolved config writes it) is no HetPipe run: the homogeneous layout (tp, pp, dp) trains.
bool trains_virtual_workers(const HeteroConfig& h);

// Where each rank sits — its VW and stage — is the Layout's to say (train/loop/session.h
// layout_from_config builds it from this list; dist/layout.h answers).

}  // namespace baton
