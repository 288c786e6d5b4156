// Lowering pass; see lower.h for what it inserts and where.
#include "pipeline/lower.h"

#include <map>

#include "core/error.h"
#include "pipeline/schedules.h"

namespace baton::pipeline {

Program lower(const Program& in) {
  BATON_ASSERT(!in.lowered, "lower: program is already lowered");
  Program out{.spec = in.spec, .lowered = true};
  out.ranks.resize(in.ranks.size());
  const int last_stage = in.num_stages() - 1;
  const int m = in.spec.microbatches;
  const ScheduleTraits& traits = in.traits();
  const bool flush = traits.synchronous();

  for (size_t r = 0; r < in.ranks.size(); ++r) {
    auto& dst = out.ranks[r];
    const std::vector<int> stages = in.stages_of(static_cast<int>(r));
    // Backward completions, for the update rule: per stage (2bw, pipedream) and per step (flush).
    std::map<int, int> done_in_batch;  // stage -> completions in the current batch
    std::map<int, int> done_in_step;   // step -> completions on this rank
    std::map<int, int> version;        // stage -> latest weight version
    auto update = [&](int stage) {
      dst.push_back(Instr{.op = Op::REDUCE_GRADS, .stage = stage});
      dst.push_back(Instr{.op = Op::OPT_STEP, .stage = stage, .weight_version = ++version[stage]});
    };
    for (const Instr& c : in.ranks[r]) {
      BATON_ASSERT(is_compute(c.op), "lower: unexpected {} in a compute-only program", op_name(c.op));
      auto comm = [&](Op op, int peer_stage) {
        dst.push_back(Instr{.op = op,
                            .stage = c.stage,
                            .microbatch = c.microbatch,
                            .slot = c.slot,
                            .peer = in.rank_of(peer_stage, c.microbatch)});
      };
      switch (c.op) {
        case Op::FWD:
          if (c.stage > 0) comm(Op::RECV_ACT, c.stage - 1);
          dst.push_back(c);
          if (c.stage < last_stage) comm(Op::SEND_ACT, c.stage + 1);
          break;
        case Op::BWD:
        case Op::BWD_INPUT:
          if (c.stage < last_stage) comm(Op::RECV_GRAD, c.stage + 1);
          dst.push_back(c);
          if (c.stage > 0) comm(Op::SEND_GRAD, c.stage - 1);
          break;
        case Op::BWD_WEIGHT:
          dst.push_back(c);
          break;
        default:
          break;
      }
      if (c.op != Op::BWD && c.op != Op::BWD_WEIGHT) continue;
      // The backward of (stage, microbatch) is complete: does the kind update weights here?
      if (flush) {
        const int step = c.microbatch / m;
        if (++done_in_step[step] == m * static_cast<int>(stages.size())) {
          for (int s : stages) dst.push_back(Instr{.op = Op::REDUCE_GRADS, .stage = s});
          for (int s : stages)
            dst.push_back(Instr{.op = Op::OPT_STEP, .stage = s, .weight_version = ++version[s]});
        }
      } else if (traits.update == UpdateRule::PER_BATCH) {  // 2bw, and 1F1B* (2BW's updates)
        if (++done_in_batch[c.stage] == m) {
          done_in_batch[c.stage] = 0;
          update(c.stage);
        }
      } else {  // PER_MICROBATCH (pipedream): every backward is an update of its stage
        BATON_ASSERT(traits.update == UpdateRule::PER_MICROBATCH, "lower: no update rule for {}",
                     in.spec.kind);
        update(c.stage);
      }
    }
  }
  return out;
}

}  // namespace baton::pipeline
