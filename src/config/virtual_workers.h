// hetero.virtual_workers (DESIGN §6): the virtual workers of a HetPipe run, one entry per VW
// listing its ranks, one per pipeline stage, in stage order ("0", "2,3"). An empty list means one
// VW of one stage per rank. VW k is entry k; every rank of the job belongs to exactly one VW.
#pragma once
#include <vector>

#include "config/config.h"

namespace baton {

// The ranks of each VW. Throws Error (with a hint) for an entry that is not a list of ranks, a
// rank named twice, and — when world_size > 0 — ranks outside [0, world_size) or left out.
std::vector<std::vector<int>> virtual_worker_ranks(const HeteroConfig& h, int world_size);

// Whether `baton train` runs virtual workers (train/wsp_trainer.h): hetero.sync = "wsp", or
// hetero.sync = "allreduce" (the synchronous baseline) with hetero.virtual_workers named or
// hetero.nm > 1. A [hetero] section at its defaults (sync = "allreduce" and nothing else, as every
// resolved config writes it) is no HetPipe run: the homogeneous layout (tp, pp, dp) trains.
bool trains_virtual_workers(const HeteroConfig& h);

// The VW that `rank` belongs to.
int virtual_worker_of(const std::vector<std::vector<int>>& vws, int rank);

}  // namespace baton
