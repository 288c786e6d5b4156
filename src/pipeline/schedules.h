// Schedule generators: ScheduleSpec -> Program (compute ops only: FWD, BWD, BWD_INPUT, BWD_WEIGHT,
// each with its activation slot and weight version). `lower` (lower.h) then adds communication,
// gradient reductions and optimizer steps. A registry maps kind names to generators; every kind's
// ordering and update rule is documented in docs/schedules.md and next to its generator.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "pipeline/instr.h"

namespace baton::pipeline {

// The registry in a stable order: gpipe, 1f1b, interleaved, pipedream, 2bw, zb-h1, 1f1b-star,
// hetpipe, wsp.
const std::vector<ScheduleTraits>& schedule_registry();
// The registered kinds' names, in registry order (config validation's allowed values).
std::vector<std::string> schedule_kinds();
// The traits of `kind`; throws Error (with the valid kinds as hint) for an unknown one.
const ScheduleTraits& schedule_traits(std::string_view kind);

// Throws Error (what + hint) for a spec no generator accepts: unknown kind, pp < 1, vp > 1 with a
// kind other than interleaved, interleaved microbatches not a multiple of pp, 2bw with
// microbatches < pp, bad replicas, ...
void check_spec(const ScheduleSpec& spec);

// check_spec, then the kind's generator. The result passes `validate`.
Program generate(const ScheduleSpec& spec);

// Schedules whose optimizer step waits for a flush (all microbatches of the step), giving the
// strict update W(t+1) = W(t) − lr·∇f(W(t)): gpipe, 1f1b, interleaved, zb-h1.
// (= schedule_traits(kind).synchronous(), false for unknown kinds.)
bool is_flush_kind(const std::string& kind);

// MadPipe's 1F1B* (Beaumont et al. §4.1; notes-hetpipe-madpipe §C.2), the periodic schedule that
// stores the fewest activations for a period T. Resources (stages, and the cuts between them as
// extra resources of load C = 2a/β) are grouped from the end: the last stage opens group 1 and
// earlier resources join the current group while its total load stays ≤ T. A stage of group g
// stores g activations. Returns, per stage, that g ("in flight": forwards before its first
// backward). `cut_loads` has pp − 1 entries or is empty (no communication); each load must be ≤ T.
std::vector<int> one_f_one_b_star_in_flight(const std::vector<double>& stage_loads,
                                            const std::vector<double>& cut_loads, double T);

// The 1f1b-star program with `in_flight[s]` forwards of stage s before its first backward: each
// group runs F(first..last stage) then B(last..first) back to back, i.e. on every stage g
// warm-up forwards, then one backward (the oldest) and one forward per period — 1F1B order with
// the group index as the in-flight count, continuous (no flush) over steps × microbatches.
// Updates and versions are PipeDream-2BW's (MadPipe's memory model keeps 2 weight versions + a
// gradient: 3W): an update per stage after each batch of m microbatches, microbatch k reads
// max(⌊k/m⌋ − 1, 0). `in_flight` must have pp entries, be ≥ 1 and non-increasing along the
// pipeline (1F1B* groups are; this also makes the order deadlock-free), and m ≥ max in_flight.
// The registry's "1f1b-star" (generate) is the degenerate case of equal stage loads, free
// communication and T = one stage's load: every stage its own group, in_flight = pp − s (the
// order of 2bw).
Program generate_1f1b_star(const ScheduleSpec& spec, const std::vector<int>& in_flight);

}  // namespace baton::pipeline
