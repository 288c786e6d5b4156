// hetero.cluster + hetero.policy in `baton train` (DESIGN §6, docs/hetpipe.md "From a cluster file to
// a run"): the virtual workers and Nm come from the same planner as `baton plan --algorithm hetpipe`
// (app/hetpipe_plan.h) on the cluster file, analytically (no profile), with the CLI's defaults
// (policy "" = hd, k = the GPUs of the cluster's first node). One rank per GPU of the cluster,
// numbered 0.. in VW order; each stage names its GPU's device (RANK@DEVICE:FIRST-END,
// config/virtual_workers.h). Called by the trainer's integration before the VWs are read; the
// config's own hetero.virtual_workers must then be empty.
#pragma once
#include <string>
#include <vector>

#include "config/config.h"

namespace baton::app {

// hetero.virtual_workers for the cluster of cfg.hetero.cluster split by cfg.hetero.policy. Throws
// Error (with a hint) when the cluster file does not load, its GPU count is not world_size, the
// policy does not fit the cluster's shape, hetero.virtual_workers is given as well, or a virtual
// worker fits no partition in memory (at Nm = 1, or at an explicit hetero.nm).
std::vector<std::string> derive_virtual_workers(const Config& cfg, int world_size);

// Nm for a run whose VWs come from hetero.cluster: hetero.nm when the config sets it (Config::origins
// has "hetero.nm"), else the smallest Max_m over the VWs (the largest Nm whose partitions fit every
// GPU's memory as the trainer allocates it, HetPipe §4; searched up to min(train.steps, 1024)).
// Same errors as above.
int derive_nm(const Config& cfg, int world_size);

}  // namespace baton::app
