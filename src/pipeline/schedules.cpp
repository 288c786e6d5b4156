// Schedule generators. Each generator only decides the *order* of compute ops on every rank and
// the weight version each op reads; slots are then assigned by one shared rule (lowest free slot,
// released by the op that finishes the microbatch's backward on that stage). Communication and
// optimizer steps are `lower`'s job, so no generator mixes ordering with communication.
//
// Paper references: notes-dissertation §1 (GPipe §1.2, PipeDream §1.3, 2BW §1.4, Flush §1.5,
// interleaved §1.6), notes-pipedream §1 (NOAM, 1F1B-RR, stashing, vertical sync), Qi et al.
// "Zero Bubble Pipeline Parallelism" (ZB-H1).
#include "pipeline/schedules.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <utility>

#include "core/error.h"

namespace baton::pipeline {

namespace {

using Ops = std::vector<Instr>;

Instr compute(Op op, int stage, int mb, int version = 0) {
  return Instr{.op = op, .stage = stage, .microbatch = mb, .weight_version = version};
}

// 1F1B on one stage over the microbatch ids `mbs` (in order): `in_flight` forwards before the
// first backward, then alternate one backward (oldest) and one forward (newest), then drain.
// PipeDream-Flush (notes-dissertation §1.5): stage s of p runs p − s − 1 warm-up forwards, then
// steady "F, B" pairs, i.e. in_flight = p − s forwards precede the first backward.
void one_f_one_b(Ops& out, int stage, const std::vector<int>& mbs, int in_flight,
                 const std::vector<int>& versions) {
  const int n = static_cast<int>(mbs.size());
  const int warm = std::min(in_flight, n);
  int f = 0;
  int b = 0;
  for (; f < warm; ++f) out.push_back(compute(Op::FWD, stage, mbs[f], versions[f]));
  while (b < n) {
    out.push_back(compute(Op::BWD, stage, mbs[b], versions[b]));
    ++b;
    if (f < n) {
      out.push_back(compute(Op::FWD, stage, mbs[f], versions[f]));
      ++f;
    }
  }
}

std::vector<int> iota_from(int first, int count) {
  std::vector<int> v(count);
  std::iota(v.begin(), v.end(), first);
  return v;
}

// Flush schedules repeat one step's order `steps` times; step t's microbatches are t·m .. t·m+m−1
// and read weight version t (strict semantics: W(t+1) = W(t) − lr·∇f(W(t))).
template <typename StepFn>
Program repeat_steps(const ScheduleSpec& spec, int num_ranks, StepFn step_order) {
  Program p{.spec = spec};
  p.ranks.resize(num_ranks);
  for (int t = 0; t < spec.steps; ++t)
    for (int r = 0; r < num_ranks; ++r) step_order(p.ranks[r], r, t * spec.microbatches, t);
  return p;
}

// GPipe (notes-dissertation §1.2): all forwards, then all backwards, then the flush. Backwards run
// in ascending microbatch order (as PyTorch's ScheduleGPipe); with equal per-microbatch costs the
// order changes neither the makespan nor the m stashed activations.
Program gen_gpipe(const ScheduleSpec& spec) {
  const int m = spec.microbatches;
  return repeat_steps(spec, spec.pp, [&](Ops& out, int r, int first, int t) {
    for (int k = 0; k < m; ++k) out.push_back(compute(Op::FWD, r, first + k, t));
    for (int k = 0; k < m; ++k) out.push_back(compute(Op::BWD, r, first + k, t));
  });
}

// PipeDream-Flush / 1F1B (notes-dissertation §1.5, Figure 4.4 top): warm-up of p − s − 1
// forwards on stage s, steady 1F1B, cool-down backwards, flush, one optimizer step.
Program gen_1f1b(const ScheduleSpec& spec) {
  const int m = spec.microbatches;
  const int p = spec.pp;
  return repeat_steps(spec, p, [&](Ops& out, int s, int first, int t) {
    one_f_one_b(out, s, iota_from(first, m), p - s, std::vector<int>(m, t));
  });
}

// Interleaved 1F1B (PTD-P, notes-dissertation §1.6; ordering as Megatron-LM's
// forward_backward_pipelining_with_interleaving): rank r holds chunks c = 0..v−1, chunk c being
// model stage c·p + r. The rank's forwards are numbered i = 0 .. v·m − 1 and walk the microbatches
// in groups of p: forward i runs chunk (i mod p·v) / p on microbatch (i / p·v)·p + i mod p; the
// backwards walk the same sequence with the chunk order reversed. Warm-up: (p − r − 1)·2 + (v − 1)·p
// forwards (capped at v·m), then one forward / one backward, then the remaining backwards.
// With v = 1 Megatron uses the plain 1F1B schedule, and so do we.
Program gen_interleaved(const ScheduleSpec& spec) {
  if (spec.vp == 1) return gen_1f1b(spec);
  const int m = spec.microbatches;
  const int p = spec.pp;
  const int v = spec.vp;
  return repeat_steps(spec, p, [&](Ops& out, int r, int first, int t) {
    const int total = m * v;
    auto chunk_mb = [&](int i, bool forward) {
      const int in_group = i % (p * v);
      int chunk = in_group / p;
      if (!forward) chunk = v - 1 - chunk;
      const int mb = (i / (p * v)) * p + in_group % p;
      return std::pair{chunk * p + r, first + mb};
    };
    auto fwd = [&](int i) {
      auto [stage, mb] = chunk_mb(i, true);
      out.push_back(compute(Op::FWD, stage, mb, t));
    };
    auto bwd = [&](int i) {
      auto [stage, mb] = chunk_mb(i, false);
      out.push_back(compute(Op::BWD, stage, mb, t));
    };
    const int warm = std::min((p - r - 1) * 2 + (v - 1) * p, total);
    for (int i = 0; i < warm; ++i) fwd(i);
    for (int i = 0; i < total - warm; ++i) {
      fwd(warm + i);
      bwd(i);
    }
    for (int i = total - warm; i < total; ++i) bwd(i);
  });
}

// ZB-H1 (Qi et al., zero bubble, "H1" handcrafted schedule; section order as the authors'
// ZeroBubbleH1Pipeline): the backward is split into BWD_INPUT (I, on the critical path) and
// BWD_WEIGHT (W, deferrable). Stage s runs p − s − 1 warm-up forwards, then s "F I" pairs whose W
// is deferred, then "F I W" triples (W lagging s microbatches behind I), then "I W" cool-down,
// then the s deferred W's, which fill the cool-down bubble. A slot lives until its W, so stage s
// holds at most (p − s) + s = p activations: the same peak as 1F1B (rank 0's). With F = I = W the
// bubble is (p − 1)(F + I − W) = (p − 1)·F, a third of 1F1B's (p − 1)(F + I + W).
Program gen_zb_h1(const ScheduleSpec& spec) {
  const int m = spec.microbatches;
  const int p = spec.pp;
  return repeat_steps(spec, p, [&](Ops& out, int s, int first, int t) {
    int f = 0, b = 0, w = 0;
    auto F = [&] { out.push_back(compute(Op::FWD, s, first + f++, t)); };
    auto I = [&] { out.push_back(compute(Op::BWD_INPUT, s, first + b++, t)); };
    auto W = [&] { out.push_back(compute(Op::BWD_WEIGHT, s, first + w++, t)); };
    for (int i = 0; i < p - s - 1 && f < m; ++i) F();
    for (int i = 0; i < s && f < m; ++i) F(), I();
    while (f < m) F(), I(), W();
    while (b < m) I(), W();
    while (w < m) W();
  });
}

// 1F1B over all microbatches with no flush, one sequence per rank. Used by pipedream and 2bw.
// Replicated stages (1F1B-RR, notes-pipedream §1): replica j of stage s runs microbatches
// k ≡ j (mod r_s). Stage s admits ⌈(workers of stages s..end) / r_s⌉ microbatches before its
// first backward; for the input stage that is NOAM = ⌈workers / r_0⌉ (4 for 4 unreplicated
// stages), for an unreplicated straight pipeline it is p − s, as in 1F1B.
template <typename VersionFn>
Program continuous_1f1b(const ScheduleSpec& spec, VersionFn version_of) {
  Program p{.spec = spec};
  p.ranks.resize(p.num_ranks());
  const int n = p.total_microbatches();
  for (int s = 0; s < p.num_stages(); ++s) {
    int downstream = 0;
    for (int t = s; t < p.num_stages(); ++t) downstream += p.replicas(t);
    const int r_s = p.replicas(s);
    const int in_flight = (downstream + r_s - 1) / r_s;
    for (int j = 0; j < r_s; ++j) {
      std::vector<int> mbs;
      for (int k = j; k < n; k += r_s) mbs.push_back(k);
      std::vector<int> versions(mbs.size());
      for (size_t i = 0; i < mbs.size(); ++i) versions[i] = version_of(s, mbs[i]);
      one_f_one_b(p.ranks[p.first_rank(s) + j], s, mbs, in_flight, versions);
    }
  }
  return p;
}

// PipeDream (notes-dissertation §1.3, notes-pipedream §1): asynchronous 1F1B, an optimizer step
// after every backward on each stage (lower inserts it), weight stashing: the forward reads the
// latest version and the backward reuses it. Forwards are fixed up below from the order: a
// forward reads the number of backwards its replica finished before it (each one an update).
// Straight pipeline: stage s (0-based) reads W_s(k − p + s + 1) for microbatch k, i.e. stage i
// (1-based) reads W_i(t − p + i) as in the paper. Vertical sync: every stage reads the version
// the input stage used, W(k − p + 1).
Program gen_pipedream(const ScheduleSpec& spec) {
  Program p = continuous_1f1b(spec, [](int, int) { return 0; });
  std::map<int, int> input_stage_version;  // microbatch -> version read on stage 0
  // Stage 0's ranks come first (ranks are laid out by stage), so the tags exist when needed.
  for (int r = 0; r < p.num_ranks(); ++r) {
    std::map<int, int> updates;  // stage -> backwards finished on this rank
    std::map<std::pair<int, int>, int> fwd_version;
    for (Instr& in : p.ranks[r]) {
      if (in.op == Op::FWD) {
        in.weight_version = updates[in.stage];
        if (in.stage == 0) input_stage_version[in.microbatch] = in.weight_version;
        if (spec.vertical_sync) in.weight_version = input_stage_version.at(in.microbatch);
        fwd_version[{in.stage, in.microbatch}] = in.weight_version;
      } else {
        in.weight_version = fwd_version.at({in.stage, in.microbatch});
        ++updates[in.stage];
      }
    }
  }
  return p;
}

// HetPipe's pipelined model parallelism inside a virtual worker (HetPipe §4; notes-hetpipe-madpipe
// §A.2): Nm minibatches in flight (spec.nm; 0 = pp), an update per minibatch on every stage as its
// backward finishes, and minibatch p (1-based) computed on the weights with the VW's local
// updates 1 … p − Nm applied and none later — with our 0-based ids, version max(k − Nm + 1, 0)
// on every stage, kept (stashed) until the minibatch's backward. The paper's task order:
// forwards in minibatch order, backwards in minibatch order, the last stage runs a minibatch's
// forward and backward as one task; stage s admits min(Nm, …) minibatches: the first stage Nm
// (minibatch p starts once p − Nm finished), stage s < pp − 1 max(Nm − s, 1), the last 1 — a
// non-increasing in-flight count, so the 1F1B order is deadlock-free. Every stage's forward of k
// comes after its own backward of k − Nm (it admits at most Nm), so version k − Nm + 1 exists
// there. With Nm = pp this is exactly pipedream with vertical sync.
Program gen_hetpipe(const ScheduleSpec& spec) {
  const int nm = spec.nm > 0 ? spec.nm : spec.pp;
  Program p{.spec = spec};
  p.ranks.resize(spec.pp);
  const int n = p.total_microbatches();
  const std::vector<int> mbs = iota_from(0, n);
  std::vector<int> versions(n);
  for (int k = 0; k < n; ++k) versions[k] = std::max(k - nm + 1, 0);
  for (int s = 0; s < spec.pp; ++s)
    one_f_one_b(p.ranks[s], s, mbs, s == spec.pp - 1 ? 1 : std::max(nm - s, 1), versions);
  return p;
}

// PipeDream-2BW (notes-dissertation §1.4): 1F1B without flushes, gradients accumulated over the
// m microbatches of a batch, an optimizer step per batch (lower inserts it after the batch's last
// backward on each stage), two weight versions. The paper's rule for 1-based microbatch K is
// version max(⌊(K − 1)/m⌋ − 1, 0); with our 0-based ids k = K − 1 it is max(⌊k/m⌋ − 1, 0), the
// same for forward and backward: batch n reads W(n − 1), so W(n+1) = W(n) − lr·∇f(W(n − 1)).
Program gen_2bw(const ScheduleSpec& spec) {
  const int m = spec.microbatches;
  return continuous_1f1b(spec, [m](int, int k) { return std::max(k / m - 1, 0); });
}

// MadPipe's 1F1B* (notes-hetpipe-madpipe §C.2): 1F1B order with the 1F1B* group index of each
// stage as its in-flight count, 2BW versions. See schedules.h.
Program gen_1f1b_star_with(const ScheduleSpec& spec, const std::vector<int>& in_flight) {
  const int m = spec.microbatches;
  Program p{.spec = spec};
  p.ranks.resize(spec.pp);
  const int n = p.total_microbatches();
  const std::vector<int> mbs = iota_from(0, n);
  std::vector<int> versions(n);
  for (int k = 0; k < n; ++k) versions[k] = std::max(k / m - 1, 0);
  for (int s = 0; s < spec.pp; ++s) one_f_one_b(p.ranks[s], s, mbs, in_flight[s], versions);
  return p;
}

// Registry form: equal stage loads, no communication, T = one stage's load.
Program gen_1f1b_star(const ScheduleSpec& spec) {
  return gen_1f1b_star_with(spec, one_f_one_b_star_in_flight(std::vector<double>(spec.pp, 1.0), {}, 1.0));
}

using Generator = Program (*)(const ScheduleSpec&);
struct Entry {
  ScheduleTraits traits;
  Generator gen;  // null: not generated yet
};

// The registry: every kind's traits next to its generator. The only place that knows kinds by name.
const std::vector<Entry>& registry() {
  using U = UpdateRule;
  static const std::vector<Entry> entries = {
      {{.name = "gpipe", .update = U::FLUSH, .summary = "GPipe: all forwards, all backwards, flush"},
       gen_gpipe},
      {{.name = "1f1b", .update = U::FLUSH, .summary = "PipeDream-Flush / 1F1B: one forward, one backward, flush"},
       gen_1f1b},
      {{.name = "interleaved", .update = U::FLUSH, .interleaving = true,
        .summary = "PTD-P interleaved 1F1B: vp model chunks per rank, flush"},
       gen_interleaved},
      {{.name = "pipedream", .update = U::PER_MICROBATCH, .weight_versions = 0, .replicas = true,
        .vertical_sync = true,
        .summary = "PipeDream: asynchronous 1F1B, an update per micro-batch, weight stashing"},
       gen_pipedream},
      {{.name = "2bw", .update = U::PER_BATCH, .weight_versions = 2, .min_microbatches_pp = true,
        .summary = "PipeDream-2BW: 1F1B without flush, an update per batch on W(t-1)"},
       gen_2bw},
      {{.name = "zb-h1", .update = U::FLUSH, .split_backward = true,
        .summary = "zero bubble H1: backward split into input and weight parts, flush"},
       gen_zb_h1},
      {{.name = "1f1b-star", .update = U::PER_BATCH, .weight_versions = 2,
        .min_microbatches_pp = true, .executable = false,
        .summary = "MadPipe 1F1B*: the memory-optimal periodic schedule, 2BW updates (planner and "
                   "simulator only)"},
       gen_1f1b_star},
      {{.name = "hetpipe", .update = U::PER_MICROBATCH, .weight_versions = 0, .in_flight_nm = true,
        .summary = "HetPipe pipelined model parallelism: Nm minibatches in flight, minibatch p on the "
                   "local updates 1..p-Nm"},
       gen_hetpipe},
      {{.name = "wsp", .update = U::PER_WAVE, .generated = false, .executable = false,
        .summary = "HetPipe wave synchronous parallel over virtual workers: trained with hetero.sync = "
                   "\"wsp\" (each VW's pipeline runs hetpipe), not as a parallel.schedule"},
       nullptr},
  };
  return entries;
}

const Entry* find(std::string_view kind) {
  for (const Entry& e : registry())
    if (kind == e.traits.name) return &e;
  return nullptr;
}

// Lowest free slot at each FWD; the op that completes the stage's backward (BWD or BWD_WEIGHT)
// releases it. BWD_INPUT reuses the slot of its FWD.
void assign_slots(Program& p) {
  for (auto& rank : p.ranks) {
    std::set<int> free_slots;
    int next = 0;
    std::map<std::pair<int, int>, int> slot_of;
    for (Instr& in : rank) {
      const std::pair key{in.stage, in.microbatch};
      if (in.op == Op::FWD) {
        if (free_slots.empty()) free_slots.insert(next++);
        in.slot = *free_slots.begin();
        free_slots.erase(free_slots.begin());
        slot_of[key] = in.slot;
      } else {
        in.slot = slot_of.at(key);
        if (in.op == Op::BWD || in.op == Op::BWD_WEIGHT) free_slots.insert(in.slot);
      }
    }
  }
}

}  // namespace

std::string_view update_rule_name(UpdateRule r) {
  switch (r) {
    case UpdateRule::FLUSH: return "flush";
    case UpdateRule::PER_BATCH: return "per batch";
    case UpdateRule::PER_MICROBATCH: return "per micro-batch";
    case UpdateRule::PER_WAVE: return "per wave";
  }
  return "?";
}

const std::vector<ScheduleTraits>& schedule_registry() {
  static const std::vector<ScheduleTraits> traits = [] {
    std::vector<ScheduleTraits> out;
    for (const Entry& e : registry()) out.push_back(e.traits);
    return out;
  }();
  return traits;
}

std::vector<std::string> schedule_kinds() {
  std::vector<std::string> out;
  for (const Entry& e : registry()) out.emplace_back(e.traits.name);
  return out;
}

const ScheduleTraits& schedule_traits(std::string_view kind) {
  const Entry* e = find(kind);
  BATON_REQUIRE(e, fmt::format("unknown pipeline schedule kind '{}'", kind),
                fmt::format("valid kinds: {}", fmt::join(schedule_kinds(), ", ")));
  return e->traits;
}

bool is_flush_kind(const std::string& kind) {
  const Entry* e = find(kind);
  return e && e->traits.synchronous();
}

void check_spec(const ScheduleSpec& s) {
  const ScheduleTraits& t = schedule_traits(s.kind);
  BATON_REQUIRE(t.generated, fmt::format("pipeline schedule kind '{}' is planned, not implemented yet", s.kind),
                fmt::format("valid kinds with a generator: {}", [] {
                  std::vector<std::string> g;
                  for (const Entry& e : registry())
                    if (e.gen) g.emplace_back(e.traits.name);
                  return fmt::format("{}", fmt::join(g, ", "));
                }()));
  BATON_REQUIRE(s.pp >= 1, fmt::format("pipeline stages (pp) must be at least 1, got {}", s.pp),
                "use pp = 1 for no pipeline parallelism");
  BATON_REQUIRE(s.pp <= 4096, fmt::format("pp = {} is too large (at most 4096)", s.pp),
                "use fewer pipeline stages");
  BATON_REQUIRE(s.vp >= 1, fmt::format("model chunks per rank (vp) must be at least 1, got {}", s.vp),
                "use vp = 1 unless the schedule is interleaved");
  BATON_REQUIRE(s.vp == 1 || t.interleaving,
                fmt::format("vp = {} needs the interleaved schedule, got '{}'", s.vp, s.kind),
                "model chunks per rank exist only in the interleaved 1F1B schedule: use "
                "kind interleaved, or vp = 1");
  BATON_REQUIRE(s.microbatches >= 1,
                fmt::format("microbatches must be at least 1, got {}", s.microbatches),
                "give the number of microbatches per optimizer step, e.g. 8");
  BATON_REQUIRE(s.steps >= 1, fmt::format("steps must be at least 1, got {}", s.steps),
                "give the number of optimizer steps the schedule covers, e.g. 1");
  BATON_REQUIRE(int64_t{s.microbatches} * s.steps * std::max(s.vp, 1) <= 1'000'000,
                fmt::format("{} microbatches × {} steps × vp {} is too many to schedule",
                            s.microbatches, s.steps, s.vp),
                "schedules are per step: use fewer microbatches or steps");
  BATON_REQUIRE(!t.interleaving || s.microbatches % s.pp == 0,
                fmt::format("the interleaved schedule needs microbatches a multiple of pp: {} is "
                            "not a multiple of {}",
                            s.microbatches, s.pp),
                fmt::format("PTD-P interleaving walks the microbatches in groups of pp: use {} or "
                            "{} microbatches",
                            std::max(s.pp, s.microbatches / s.pp * s.pp),
                            (s.microbatches / s.pp + 1) * s.pp));
  BATON_REQUIRE(!t.min_microbatches_pp || s.microbatches >= s.pp,
                fmt::format("{} needs at least pp microbatches per batch: {} < pp = {}", s.kind,
                            s.microbatches, s.pp),
                "two weight versions (PipeDream-2BW's, also kept by 1F1B*) suffice only when "
                "gradients are accumulated over m >= p microbatches: raise microbatches");
  BATON_REQUIRE(t.in_flight_nm || s.nm == 0,
                fmt::format("the minibatches in flight (nm) are a hetpipe option, not one of '{}'", s.kind),
                "drop nm or use kind hetpipe");
  BATON_REQUIRE(s.nm >= 0, fmt::format("nm must be at least 1 (0 = pp), got {}", s.nm),
                "give the minibatches in flight, e.g. nm = 4");
  BATON_REQUIRE(t.vertical_sync || !s.vertical_sync,
                fmt::format("vertical sync is a pipedream option, not one of '{}'", s.kind),
                "drop the vertical-sync option or use kind pipedream");
  if (!s.replicas.empty()) {
    BATON_REQUIRE(t.replicas,
                  fmt::format("replicated stages are a pipedream option, not one of '{}'", s.kind),
                  "drop the replicas option (use data parallelism instead) or use kind pipedream");
    BATON_REQUIRE(static_cast<int>(s.replicas.size()) == s.pp,
                  fmt::format("replicas lists {} stages but pp = {}", s.replicas.size(), s.pp),
                  "give one replica count per pipeline stage, e.g. --replicas 2,1 with --pp 2");
    for (int r : s.replicas)
      BATON_REQUIRE(r >= 1 && r <= 4096, fmt::format("replica counts must be >= 1, got {}", r),
                    "give one positive replica count per stage, e.g. 2,1");
    for (int r : s.replicas)
      BATON_REQUIRE(s.microbatches * s.steps % r == 0,
                    fmt::format("{} microbatches cannot be split evenly over {} replicas",
                                s.microbatches * s.steps, r),
                    "replicas synchronise their updates pairwise (1F1B-RR): use a number of "
                    "microbatches that every replica count divides");
    BATON_REQUIRE(!s.vertical_sync, "vertical sync with replicated stages is not supported",
                  "use either replicas or vertical sync");
  }
}

Program generate(const ScheduleSpec& spec) {
  check_spec(spec);
  ScheduleSpec s = spec;
  if (std::all_of(s.replicas.begin(), s.replicas.end(), [](int r) { return r == 1; }))
    s.replicas.clear();  // canonical form: no replication
  Program p = find(s.kind)->gen(s);
  BATON_ASSERT(static_cast<int>(p.ranks.size()) == p.num_ranks(), "generator {} made {} ranks",
               s.kind, p.ranks.size());
  assign_slots(p);
  return p;
}

std::vector<int> one_f_one_b_star_in_flight(const std::vector<double>& stage_loads,
                                            const std::vector<double>& cut_loads, double T) {
  const int P = static_cast<int>(stage_loads.size());
  BATON_REQUIRE(P >= 1 && (cut_loads.empty() || static_cast<int>(cut_loads.size()) == P - 1),
                fmt::format("1F1B*: {} stages need {} cut loads, got {}", P, P - 1, cut_loads.size()),
                "give one load per stage and one per cut between consecutive stages (or none)");
  BATON_REQUIRE(T > 0, fmt::format("1F1B*: the period must be positive, got {}", T), "");
  // The chain of resources: stage 0, cut 0, stage 1, ..., stage P − 1 (cuts only when given).
  std::vector<double> load;
  std::vector<int> stage_of;  // resource -> stage, −1 for a cut
  for (int s = 0; s < P; ++s) {
    load.push_back(stage_loads[s]);
    stage_of.push_back(s);
    if (s + 1 < P && !cut_loads.empty()) {
      load.push_back(cut_loads[s]);
      stage_of.push_back(-1);
    }
  }
  std::vector<int> out(P, 0);
  int g = 1;
  double sum = 0;
  for (int i = static_cast<int>(load.size()) - 1; i >= 0; --i) {
    BATON_REQUIRE(load[i] <= T * (1 + 1e-12),
                  fmt::format("1F1B*: a {} of load {} is above the period {}",
                              stage_of[i] < 0 ? "cut" : "stage", load[i], T),
                  "the period must be at least the largest stage (and cut) load");
    if (sum > 0 && sum + load[i] > T * (1 + 1e-12)) {  // does not fit: start the next group
      ++g;
      sum = 0;
    }
    sum += load[i];
    if (stage_of[i] >= 0) out[stage_of[i]] = g;
  }
  return out;
}

Program generate_1f1b_star(const ScheduleSpec& spec, const std::vector<int>& in_flight) {
  BATON_REQUIRE(spec.kind == "1f1b-star",
                fmt::format("generate_1f1b_star builds kind 1f1b-star, not '{}'", spec.kind),
                "set the spec's kind to 1f1b-star");
  check_spec(spec);
  BATON_REQUIRE(static_cast<int>(in_flight.size()) == spec.pp,
                fmt::format("1f1b-star: {} in-flight counts for pp = {}", in_flight.size(), spec.pp),
                "give one count (the stage's 1F1B* group) per stage");
  for (int s = 0; s < spec.pp; ++s) {
    BATON_REQUIRE(in_flight[s] >= 1 && (s == 0 || in_flight[s] <= in_flight[s - 1]),
                  fmt::format("1f1b-star: in-flight counts must be >= 1 and non-increasing along "
                              "the pipeline, stage {} has {}",
                              s, in_flight[s]),
                  "1F1B* group indices grow towards the first stage");
    BATON_REQUIRE(in_flight[s] <= spec.microbatches,
                  fmt::format("1f1b-star: stage {} keeps {} micro-batches in flight but a batch has "
                              "only {}",
                              s, in_flight[s], spec.microbatches),
                  "two weight versions (2BW) need microbatches >= the largest in-flight count");
  }
  ScheduleSpec s = spec;
  s.replicas.clear();
  Program p = gen_1f1b_star_with(s, in_flight);
  assign_slots(p);
  return p;
}

}  // namespace baton::pipeline
