// Lowering pass; see lower.h for what it inserts and where.
#include "pipeline/lower.h"

#include <algorithm>
#include <map>

#include "core/error.h"
#include "pipeline/schedules.h"

namespace baton::pipeline {

Program lower(const Program& in, const LowerOptions& options) {
  BATON_ASSERT(!in.lowered, "lower: program is already lowered");
  Program out{.spec = in.spec, .lowered = true, .tied_stages = options.tied_stages};
  std::sort(out.tied_stages.begin(), out.tied_stages.end());
  out.tied_stages.erase(std::unique(out.tied_stages.begin(), out.tied_stages.end()), out.tied_stages.end());
  for (int s : out.tied_stages)
    BATON_ASSERT(s >= 0 && s < in.num_stages(), "lower: tied stage {} of {}", s, in.num_stages());
  out.ranks.resize(in.ranks.size());
  const int last_stage = in.num_stages() - 1;
  const int m = in.spec.microbatches;
  const ScheduleTraits& traits = in.traits();
  BATON_ASSERT(traits.synchronous() || in.spec.vp == 1, "lower: {} updates per stage, vp must be 1",
               in.spec.kind);
  auto tied = [&](int stage) {
    return std::count(options.tied_stages.begin(), options.tied_stages.end(), stage) > 0;
  };

  for (size_t r = 0; r < in.ranks.size(); ++r) {
    auto& dst = out.ranks[r];
    const std::vector<int> stages = in.stages_of(static_cast<int>(r));
    BATON_ASSERT(!stages.empty(), "lower: rank {} holds no stage", r);
    int tied_stage = -1;  // the rank's first stage with tied layers
    for (int s : stages)
      if (tied_stage < 0 && tied(s)) tied_stage = s;
    int version = 0;
    auto update = [&] {
      if (tied_stage >= 0) dst.push_back(Instr{.op = Op::REDUCE_TIED, .stage = tied_stage});
      dst.push_back(Instr{.op = Op::REDUCE_GRADS, .stage = stages.front()});
      dst.push_back(Instr{.op = Op::OPT_STEP, .stage = stages.front(), .weight_version = ++version});
    };
    std::map<int, int> done_in_step;  // step (or batch) -> backward completions on this rank
    for (const Instr& c : in.ranks[r]) {
      BATON_ASSERT(is_compute(c.op), "lower: unexpected {} in a compute-only program", op_name(c.op));
      auto add = [&](Op op, int peer_stage) {
        dst.push_back(Instr{.op = op, .stage = c.stage, .microbatch = c.microbatch, .slot = c.slot,
                            .peer = peer_stage < 0 ? -1 : in.rank_of(peer_stage, c.microbatch)});
      };
      switch (c.op) {
        case Op::FWD:
          if (c.stage > 0) add(Op::RECV_ACT, c.stage - 1);
          if (c.stage == 0 || c.stage == last_stage) add(Op::LOAD, -1);
          dst.push_back(c);
          if (c.stage < last_stage) add(Op::SEND_ACT, c.stage + 1);
          break;
        case Op::BWD:
        case Op::BWD_INPUT:
          if (c.stage < last_stage) add(Op::RECV_GRAD, c.stage + 1);
          dst.push_back(c);
          if (c.stage > 0) add(Op::SEND_GRAD, c.stage - 1);
          break;
        case Op::BWD_WEIGHT:
          dst.push_back(c);
          break;
        default:
          break;
      }
      if (c.op != Op::BWD && c.op != Op::BWD_WEIGHT) continue;
      // The backward of (stage, microbatch) is complete: does the kind update weights here?
      switch (traits.update) {
        case UpdateRule::FLUSH:  // after the flush: every stage of the rank done with the step
          if (++done_in_step[c.microbatch / m] == m * static_cast<int>(stages.size())) update();
          break;
        case UpdateRule::PER_BATCH:  // 2bw, and 1F1B* (2BW's updates): after each batch
          if (++done_in_step[c.microbatch / m] == m) update();
          break;
        case UpdateRule::PER_MICROBATCH:  // pipedream: every backward is an update
          update();
          break;
        case UpdateRule::PER_WAVE:
          BATON_ASSERT(false, "lower: {} has no generator", in.spec.kind);
      }
    }
  }
  return out;
}

}  // namespace baton::pipeline
