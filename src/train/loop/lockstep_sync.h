// LockstepSync: the cross-group strategy of a homogeneous layout (tp × pp × dp, any schedule):
// every rank steps together — the data-parallel groups all-reduce their gradients inside the step —
// so there is nothing to synchronise between steps. The run resumes from the newest checkpoint
// (checkpoint.resume), writes one checkpoint over the whole job every checkpoint.every steps and at
// the end, and stops after the step in which any rank got SIGINT/SIGTERM (agreed by an all-reduce).
#pragma once
#include <memory>

#include "train/loop/cross_group_sync.h"

namespace baton {

std::unique_ptr<CrossGroupSync> make_lockstep_sync(const Config& cfg, dist::Comm& world, const dist::Layout& layout);

}  // namespace baton
