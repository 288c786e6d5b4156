// The job's measured timeline and its prediction as one Chrome trace; see run_trace.h.
#include "train/observe/run_trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/error.h"
#include "pipeline/lower.h"
#include "pipeline/schedules.h"
#include "pipeline/simulate.h"
#include "pipeline/trace.h"

namespace baton {
namespace {

using pipeline::Activity;
using pipeline::Op;
using pipeline::TimelineEvent;

// The measured tracks of a rank, one per kind of work (thread ids, in display order).
enum Track : int { COMPUTE, RECV_WAIT, SEND, UPDATE, LOAD, STEP, PUSH, PULL, SERVER_WAIT, kTracks };
constexpr const char* kTrackNames[kTracks] = {"compute", "receive wait", "send", "reduce + optimizer",
                                              "load", "step, evaluation, checkpoint", "wsp push", "wsp pull",
                                              "wsp server wait"};

Track track_of(const TimelineEvent& e) {
  switch (e.what) {
    case Activity::SEND_WAIT: return SEND;
    case Activity::STEP:
    case Activity::EVAL:
    case Activity::CHECKPOINT: return STEP;
    case Activity::WSP_PUSH: return PUSH;
    case Activity::WSP_PULL: return PULL;
    case Activity::WSP_WAIT: return SERVER_WAIT;
    case Activity::INSTR: break;
  }
  const Op op = e.instr.op;
  if (pipeline::is_compute(op)) return COMPUTE;
  if (op == Op::RECV_ACT || op == Op::RECV_GRAD) return RECV_WAIT;
  if (op == Op::SEND_ACT || op == Op::SEND_GRAD) return SEND;
  if (op == Op::LOAD) return LOAD;
  return UPDATE;
}

std::string instr_name(const pipeline::Instr& in) {
  return fmt::format("{}{}", pipeline::op_mnemonic(in.op), in.microbatch >= 0 ? std::to_string(in.microbatch) : "");
}

std::string event_name(const TimelineEvent& e) {
  switch (e.what) {
    case Activity::INSTR: return instr_name(e.instr);
    case Activity::SEND_WAIT: return "wait for sends before " + instr_name(e.instr);
    case Activity::STEP: return fmt::format("step {}", e.step);
    case Activity::EVAL: return "evaluation";
    case Activity::CHECKPOINT: return "checkpoint";
    case Activity::WSP_PUSH: return "push";
    case Activity::WSP_PULL: return "merge a pull";
    case Activity::WSP_WAIT: return "wait for the server";
  }
  return "?";
}

std::string rank_name(const dist::Layout& layout, int r) {
  const dist::RankPlace& p = layout.place(r);
  std::string name = fmt::format("rank {}: stage {}, group {}", r, p.stage, p.group);
  if (p.model_stages.size() > 1) name += fmt::format(" (model stages {})", fmt::join(p.model_stages, ", "));
  if (layout.tp() > 1) name += fmt::format(", tp {}", p.tp_rank);
  if (layout.pipeline(p.group).replicas_of(p.stage) > 1) name += fmt::format(", replica {}", p.replica);
  return name;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Median measured seconds of each model stage's F, B (full or input part) and W, and of the
// update ops, over every rank and traced step: the simulator's costs.
pipeline::Costs measured_costs(const std::vector<std::vector<TimelineEvent>>& ranks, const pipeline::Program& p) {
  const int S = p.num_stages();
  std::vector<std::vector<double>> f(S), b(S), w(S);
  std::map<Op, std::vector<double>> update;
  bool split = false;
  for (const auto& events : ranks)
    for (const TimelineEvent& e : events) {
      if (e.what != Activity::INSTR) continue;
      const double d = e.end - e.start;
      const pipeline::Instr& in = e.instr;
      if (pipeline::is_compute(in.op) && (in.stage < 0 || in.stage >= S)) continue;
      switch (in.op) {
        case Op::FWD: f[in.stage].push_back(d); break;
        case Op::BWD:
        case Op::BWD_INPUT: b[in.stage].push_back(d); break;
        case Op::BWD_WEIGHT:
          w[in.stage].push_back(d);
          split = true;
          break;
        case Op::REDUCE_GRADS:
        case Op::REDUCE_TIED:
        case Op::OPT_STEP: update[in.op].push_back(d); break;
        default: break;
      }
    }
  pipeline::Costs c;
  for (int s = 0; s < S; ++s)
    c.stage.push_back({.f = median(f[s]), .b = median(b[s]), .w = split ? median(w[s]) : 0.0});
  c.reduce = median(update[Op::REDUCE_GRADS]);
  c.tied = median(update[Op::REDUCE_TIED]);
  c.opt = median(update[Op::OPT_STEP]);
  return c;
}

// Earliest start of an instruction of `step` on any rank (where its predicted copy is drawn).
double step_start(const std::vector<std::vector<TimelineEvent>>& ranks, int64_t step) {
  double t = 0;
  bool any = false;
  for (const auto& events : ranks)
    for (const TimelineEvent& e : events)
      if (e.what == Activity::INSTR && e.step == step && (!any || e.start < t)) t = e.start, any = true;
  return t;
}

// Per world rank: 1 − its compute time / the summed spans of its pipeline's traced steps (first
// instruction start to last instruction end over the pipeline's ranks).
std::vector<double> idle_shares(const std::vector<std::vector<TimelineEvent>>& ranks, const dist::Layout& layout) {
  const int world = static_cast<int>(ranks.size());
  std::map<std::pair<int, int64_t>, std::pair<double, double>> span;  // (group, step) -> [first, last]
  for (int r = 0; r < world; ++r)
    for (const TimelineEvent& e : ranks[r]) {
      if (e.what != Activity::INSTR) continue;
      auto [it, fresh] = span.try_emplace({layout.place(r).group, e.step}, e.start, e.end);
      if (!fresh) it->second = {std::min(it->second.first, e.start), std::max(it->second.second, e.end)};
    }
  std::vector<double> out(world, 0);
  for (int r = 0; r < world; ++r) {
    double busy = 0, total = 0;
    for (const TimelineEvent& e : ranks[r])
      if (e.what == Activity::INSTR && pipeline::is_compute(e.instr.op)) busy += e.end - e.start;
    for (const auto& [key, s] : span)
      if (key.first == layout.place(r).group) total += s.second - s.first;
    out[r] = total > 0 ? 1 - busy / total : 0;
  }
  return out;
}

std::string event_args(const TimelineEvent& e) {
  std::string a = fmt::format(R"("step":{})", e.step);
  if (e.what == Activity::INSTR || e.what == Activity::SEND_WAIT) {
    const pipeline::Instr& in = e.instr;
    a += fmt::format(R"(,"stage":{},"microbatch":{},"slot":{},"weight_version":{})", in.stage, in.microbatch,
                     in.slot, in.weight_version);
    if (in.peer >= 0) a += fmt::format(R"(,"peer":{})", in.peer);
  }
  return a;
}

}  // namespace

std::string run_trace_json(const std::vector<std::vector<TimelineEvent>>& ranks, const dist::Layout& layout,
                           const pipeline::Program& program, RunTraceSummary* summary) {
  BATON_ASSERT(static_cast<int>(ranks.size()) == layout.world(), "{} timelines for {} ranks", ranks.size(),
               layout.world());
  constexpr double kUs = 1e6;
  const int world = layout.world();
  pipeline::ChromeTrace trace;
  std::vector<int64_t> steps;
  int events = 0;
  for (int r = 0; r < world; ++r) {
    trace.process(r, rank_name(layout, r), r);
    for (int t = 0; t < kTracks; ++t) trace.thread(r, t, kTrackNames[t]);
    for (const TimelineEvent& e : ranks[r]) {
      const Track t = track_of(e);
      const std::string_view cat = e.what == Activity::INSTR ? pipeline::op_name(e.instr.op) : kTrackNames[t];
      trace.complete(r, t, event_name(e), cat, e.start * kUs, (e.end - e.start) * kUs, event_args(e));
      if (e.what == Activity::INSTR && std::find(steps.begin(), steps.end(), e.step) == steps.end())
        steps.push_back(e.step);
      ++events;
    }
  }
  // The prediction: the same kind and pipeline, one step for flush kinds (drawn at every traced
  // step's start), the traced steps at once for asynchronous kinds.
  std::sort(steps.begin(), steps.end());
  pipeline::ScheduleSpec spec = program.spec;
  const bool flush = program.traits().synchronous();
  spec.steps = flush ? 1 : std::max<int>(1, std::min<int>(static_cast<int>(steps.size()), program.spec.steps));
  const pipeline::Program predicted =
      pipeline::lower(pipeline::generate(spec), {.tied_stages = program.tied_stages});
  const pipeline::SimResult sim = pipeline::simulate(predicted, measured_costs(ranks, predicted));
  const int pid0 = world;
  for (int r = 0; r < predicted.num_ranks(); ++r) {
    const int pid = pid0 + r;
    trace.process(pid, fmt::format("predicted (simulator, measured costs): pipeline rank {}", r), pid);
    trace.thread(pid, 0, "compute");
    trace.thread(pid, 1, "wait");
  }
  std::vector<int64_t> drawn = flush ? steps : std::vector<int64_t>(steps.begin(), steps.begin() + std::min<size_t>(1, steps.size()));
  for (int64_t s : drawn) pipeline::add_simulated(trace, predicted, sim, pid0, kUs, step_start(ranks, s) * kUs);
  if (summary) {
    summary->events = events;
    summary->idle_share = idle_shares(ranks, layout);
    summary->predicted_idle_share.clear();
    for (int r = 0; r < predicted.num_ranks(); ++r)
      summary->predicted_idle_share.push_back(sim.makespan > 0 ? sim.idle[r] / sim.makespan : 0);
  }
  return trace.str();
}

RunTraceSummary write_run_trace(const pipeline::Timeline& timeline, double origin, dist::Comm& world,
                                const dist::Layout& layout, const pipeline::Program& program,
                                const std::string& path) {
  std::vector<TimelineEvent> mine = timeline.events();
  for (TimelineEvent& e : mine) e.start -= origin, e.end -= origin;
  // Counts first, then each rank's events as bytes to rank 0 (plain data: the same binary).
  const int n = world.size(), me = world.rank();
  std::vector<int64_t> counts(n, 0);
  counts[me] = static_cast<int64_t>(mine.size());
  world.all_gather(&counts[me], counts.data(), 1, DType::I64);
  constexpr int kTag = 31000;  // the world communicator carries no other point-to-point message
  if (me != 0) {
    if (!mine.empty()) world.send(mine.data(), mine.size() * sizeof(TimelineEvent), DType::U8, 0, kTag)->wait();
    return {};
  }
  std::vector<std::vector<TimelineEvent>> all(n);
  all[0] = std::move(mine);
  for (int r = 1; r < n; ++r) {
    all[r].resize(static_cast<size_t>(counts[r]));
    if (counts[r] > 0) world.recv(all[r].data(), all[r].size() * sizeof(TimelineEvent), DType::U8, r, kTag)->wait();
  }
  RunTraceSummary summary;
  const std::string json = run_trace_json(all, layout, program, &summary);
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << json;
    f.flush();
    if (!f.good()) {
      const std::string why = std::strerror(errno);
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      throw Error(fmt::format("cannot write {}: {}", tmp, why),
                  "free space in run.dir (or point run.dir elsewhere), or set run.trace = false");
    }
  }
  std::filesystem::rename(tmp, path);
  return summary;
}

}  // namespace baton
