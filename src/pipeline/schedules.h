// Schedule generators: ScheduleSpec -> Program (compute ops only: FWD, BWD, BWD_INPUT, BWD_WEIGHT,
// each with its activation slot and weight version). `lower` (lower.h) then adds communication,
// gradient reductions and optimizer steps. A registry maps kind names to generators; every kind's
// ordering and update rule is documented in docs/schedules.md and next to its generator.
#pragma once
#include <string>
#include <vector>

#include "pipeline/instr.h"

namespace baton::pipeline {

// The registered kinds, in a stable order: gpipe, 1f1b, interleaved, pipedream, 2bw, zb-h1.
std::vector<std::string> schedule_kinds();

// Throws Error (what + hint) for a spec no generator accepts: unknown kind, pp < 1, vp > 1 with a
// kind other than interleaved, interleaved microbatches not a multiple of pp, 2bw with
// microbatches < pp, bad replicas, ...
void check_spec(const ScheduleSpec& spec);

// check_spec, then the kind's generator. The result passes `validate`.
Program generate(const ScheduleSpec& spec);

// Schedules whose optimizer step waits for a flush (all microbatches of the step), giving the
// strict update W(t+1) = W(t) − lr·∇f(W(t)): gpipe, 1f1b, interleaved, zb-h1.
bool is_flush_kind(const std::string& kind);

}  // namespace baton::pipeline
