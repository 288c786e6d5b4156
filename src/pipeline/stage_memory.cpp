// A pipeline rank's device memory as the trainer allocates it; see stage_memory.h.
#include "pipeline/stage_memory.h"

#include <algorithm>
#include <climits>

#include "core/error.h"
#include "pipeline/lower.h"
#include "pipeline/schedules.h"
#include "pipeline/simulate.h"

namespace baton::pipeline {

namespace {

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

StageMemory stage_memory(std::span<const LayerBytes> layers, bool first, bool last, const StageContext& c,
                         const StageCounts& counts) {
  BATON_ASSERT(c.granularity > 0 && c.act_size > 0 && counts.slots >= 1 && counts.weight_versions >= 0,
               "stage memory: granularity {}, act size {}, {} slots, {} versions", c.granularity, c.act_size,
               counts.slots, counts.weight_versions);
  // One Backend::alloc of `bytes` (the CPU backend takes at least one unit, even for 0 bytes).
  auto alloc = [&](size_t bytes) { return std::max(c.granularity, round_up(bytes, c.granularity)); };
  // SequentialModel::reserve skips zero-byte buffers.
  auto alloc_some = [&](size_t bytes) { return bytes == 0 ? size_t{0} : alloc(bytes); };
  size_t floats = 0, buffers = 0, saved = 0, work = 0, io = 0;
  for (const LayerBytes& l : layers) {
    floats += l.param_floats;
    buffers += l.buffer_floats;
    saved += round_up(l.saved, 256);  // each layer's saved tensors start 256-byte aligned
    work = std::max(work, l.work);
    io = std::max(io, l.out);
  }
  const size_t act = static_cast<size_t>(c.act_size);
  const bool separate_compute = act != sizeof(float);  // bf16: the ops read an act-dtype copy
  StageMemory m;
  // SequentialModel's constructor: masters, gradients, compute copy, buffers, loss accumulators.
  m.weights = alloc(floats * sizeof(float)) + (separate_compute ? alloc(floats * act) : 0) +
              alloc_some(buffers * sizeof(float)) + alloc((1 + static_cast<size_t>(c.metrics)) * sizeof(double));
  m.gradients = alloc(floats * sizeof(float));
  // Optimizer::alloc_state: max(state floats, 1) each.
  m.optimizer = static_cast<size_t>(c.optimizer_states) * alloc(std::max<size_t>(floats, 1) * sizeof(float));
  // WeightVersions::start: an fp32 copy per version, and its compute copy under bf16.
  m.versions = static_cast<size_t>(counts.weight_versions) *
               (alloc(floats * sizeof(float)) + (separate_compute ? alloc(floats * act) : 0));
  // SequentialModel::reserve. A boundary buffer holds the larger of the stage's input and output
  // (in whole activations); the loss stage sends nothing on.
  size_t boundary = 0;
  if (!(first && last) && !layers.empty()) {
    boundary = layers.front().in / act;
    if (!last) boundary = std::max(boundary, layers.back().out / act);
    boundary *= act;
  }
  const size_t per_slot = alloc_some(saved) + 3 * alloc_some(boundary) + (first ? alloc_some(c.input_bytes) : 0) +
                          (last ? alloc_some(c.target_bytes) : 0);
  m.activations = static_cast<size_t>(counts.slots) * per_slot + alloc(work) + 2 * alloc_some(io);
  return m;
}

int weight_ring_size(const std::vector<Instr>& list) {
  // At OPT_STEP n the new version n and every older version a later compute op still reads (stashed
  // for an in-flight micro-batch) are alive: a ring of that many buffers indexed by n mod size never
  // overwrites a version that is still needed.
  int versions = 1;
  int oldest_later = INT_MAX;
  for (size_t i = list.size(); i-- > 0;) {
    const Instr& in = list[i];
    if (is_compute(in.op)) oldest_later = std::min(oldest_later, in.weight_version);
    if (in.op == Op::OPT_STEP && oldest_later != INT_MAX)
      versions = std::max(versions, in.weight_version - oldest_later + 1);
  }
  return versions;
}

std::vector<Instr> backwards_first(const std::vector<Instr>& list) {
  std::vector<Instr> out;
  std::vector<char> moved(list.size(), 0);
  // The groups of backward instructions, by their first index: [first, one past the OPT_STEP).
  const auto group_end = [&](size_t j) {
    while (j < list.size() && list[j].op != Op::OPT_STEP) ++j;
    return std::min(j + 1, list.size());
  };
  for (size_t i = 0; i < list.size(); ++i) {
    if (moved[i]) continue;
    const Instr& in = list[i];
    if (in.op == Op::RECV_ACT || in.op == Op::FWD) {
      // Every later backward group of an earlier micro-batch, in order, before this forward (the
      // executor runs them only in minibatch order and only before a later forward).
      for (size_t j = i + 1; j < list.size(); ++j) {
        if (moved[j]) continue;
        const Op op = list[j].op;
        if (op == Op::FWD || op == Op::RECV_ACT || op == Op::LOAD || op == Op::SEND_ACT) {
          if (list[j].microbatch != in.microbatch) break;
          continue;
        }
        if (op != Op::RECV_GRAD && op != Op::BWD) continue;
        if (list[j].microbatch >= in.microbatch) break;  // backwards run in order
        const size_t e = group_end(j);
        for (size_t g = j; g < e; ++g) {
          out.push_back(list[g]);
          moved[g] = 1;
        }
        j = e - 1;
      }
    }
    out.push_back(in);
  }
  return out;
}

int weight_ring_size_ahead(const std::vector<Instr>& list) {
  return std::max(weight_ring_size(list), weight_ring_size(backwards_first(list)));
}

std::vector<StageCounts> hetpipe_stage_counts(int pp, int nm) {
  BATON_ASSERT(pp >= 1 && nm >= 1, "hetpipe counts: pp {}, Nm {}", pp, nm);
  if (pp == 1) return {{.slots = 1, .weight_versions = 0}};
  // The program the StepRunner runs (one micro-batch per minibatch), long enough for every stage
  // to reach its steady state: Nm in flight on the first stage, its weight ring full.
  const ScheduleSpec spec{.kind = "hetpipe", .pp = pp, .microbatches = 1, .steps = pp + 1 + 2 * nm, .nm = nm};
  const Program p = lower(generate(spec));
  const MemoryPeaks peaks = memory_peaks(p);
  std::vector<StageCounts> counts;
  for (int s = 0; s < pp; ++s)
    counts.push_back({.slots = std::max(1, peaks.activations[s]) + kEvaluationSlots,
                      .weight_versions = weight_ring_size_ahead(p.ranks[s])});
  return counts;
}

StageCounts hetpipe_stage_counts(int pp, int nm, int stage) {
  BATON_ASSERT(stage >= 0 && stage < pp, "hetpipe counts: stage {} of {}", stage, pp);
  return hetpipe_stage_counts(pp, nm)[stage];
}

}  // namespace baton::pipeline
