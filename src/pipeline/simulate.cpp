// Event simulation of a lowered Program (machine model in simulate.h). Ranks run from a worklist:
// a rank runs until it blocks on a receive or a collective; a send wakes its peer, a completed
// collective its replicas. Times are longest paths through the dependency graph, so the result does
// not depend on the order ranks are visited.
#include "pipeline/simulate.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <tuple>

#include "core/error.h"
#include "pipeline/text.h"

namespace baton::pipeline {

Costs Costs::uniform(const Program& p, double F, double B, std::optional<double> W, double send) {
  const double v = p.spec.vp;
  StageCost c{.f = F / v, .b = (W ? B : B / 2) / v, .w = (W ? *W : B / 2) / v};
  Costs out;
  out.stage.assign(p.num_stages(), c);
  out.send_act.assign(p.num_stages(), send);
  out.send_grad.assign(p.num_stages(), send);
  return out;
}

MemoryPeaks memory_peaks(const Program& p) {
  MemoryPeaks out;
  for (int r = 0; r < static_cast<int>(p.ranks.size()); ++r) {
    const auto& rank = p.ranks[r];
    const std::vector<int> stages = p.stages_of(r);
    std::set<std::pair<int, int>> live;
    std::map<int, int> latest;
    std::map<int, std::multiset<int>> in_flight;
    std::map<std::pair<int, int>, int> version_of;
    size_t peak_act = 0;
    size_t peak_ver = 0;
    auto versions_live = [&](int stage) {
      std::set<int> v(in_flight[stage].begin(), in_flight[stage].end());
      v.insert(latest[stage]);
      peak_ver = std::max(peak_ver, v.size());
    };
    for (const Instr& in : rank) {
      const std::pair key{in.stage, in.microbatch};
      if (in.op == Op::FWD) {
        live.insert(key);
        peak_act = std::max(peak_act, live.size());
        version_of[key] = in.weight_version;
        in_flight[in.stage].insert(in.weight_version);
        versions_live(in.stage);
      } else if (in.op == Op::BWD || in.op == Op::BWD_WEIGHT) {
        live.erase(key);
        auto it = in_flight[in.stage].find(version_of[key]);
        if (it != in_flight[in.stage].end()) in_flight[in.stage].erase(it);
      } else if (in.op == Op::OPT_STEP) {  // updates every stage of the rank
        for (int s : stages) {
          latest[s] = in.weight_version;
          versions_live(s);
        }
      }
    }
    out.activations.push_back(static_cast<int>(peak_act));
    out.weight_versions.push_back(static_cast<int>(peak_ver));
  }
  return out;
}

SimResult simulate(const Program& p, const Costs& costs) {
  BATON_REQUIRE(p.lowered, "simulate needs a lowered program (with sends and receives)",
                "run pipeline::lower on the generator's program first");
  BATON_REQUIRE(static_cast<int>(costs.stage.size()) == p.num_stages(),
                fmt::format("costs give {} stages, the program has {}", costs.stage.size(),
                            p.num_stages()),
                "give one StageCost per model stage (pp × vp)");
  const int R = static_cast<int>(p.ranks.size());
  auto send_cost = [](const std::vector<double>& v, int stage) {
    return stage < static_cast<int>(v.size()) ? v[stage] : 0.0;
  };

  SimResult res;
  res.busy.assign(R, 0);
  res.start.resize(R);
  res.end.resize(R);
  for (int r = 0; r < R; ++r) {
    res.start[r].assign(p.ranks[r].size(), 0);
    res.end[r].assign(p.ranks[r].size(), 0);
  }
  std::vector<size_t> pc(R, 0);
  std::vector<double> now(R, 0);
  // (receiving rank, is_grad, receiving stage, microbatch, sending rank) -> arrival time
  std::map<std::tuple<int, int, int, int, int>, double> mailbox;
  struct Collective {
    int arrived = 0;
    double ready = 0;
  };
  std::map<std::pair<int, int>, Collective> collectives;  // (stage, n-th reduction)
  std::vector<std::map<int, int>> reductions(R);          // per rank: stage -> reductions done
  std::vector<char> registered(R, 0);

  // Who takes part in each collective: a stage's replicas; the tied ranks by replica index.
  auto replica_of = [&](int r) { return r - p.first_rank(p.stages_of(r).front()); };
  auto replica_members = [&](int stage) {
    std::vector<int> m(p.replicas(stage));
    for (int j = 0; j < p.replicas(stage); ++j) m[j] = p.first_rank(stage) + j;
    return m;
  };
  std::map<int, std::vector<int>> tied_members;
  for (int r = 0; r < R; ++r)
    for (int s : p.stages_of(r))
      if (std::count(p.tied_stages.begin(), p.tied_stages.end(), s)) {
        tied_members[replica_of(r)].push_back(r);
        break;
      }

  std::deque<int> work;
  std::vector<char> queued(R, 1);
  for (int r = 0; r < R; ++r) work.push_back(r);
  auto wake = [&](int r) {
    if (r >= 0 && r < R && !queued[r]) {
      queued[r] = 1;
      work.push_back(r);
    }
  };

  while (!work.empty()) {
    const int r = work.front();
    work.pop_front();
    queued[r] = 0;
    while (pc[r] < p.ranks[r].size()) {
      const Instr& in = p.ranks[r][pc[r]];
      double& t = now[r];
      const double begin = t;
      const StageCost& c = costs.stage[in.stage];
      bool blocked = false;
      switch (in.op) {
        case Op::FWD: t += c.f; break;
        case Op::BWD: t += c.b + c.w; break;
        case Op::BWD_INPUT: t += c.b; break;
        case Op::BWD_WEIGHT: t += c.w; break;
        case Op::SEND_ACT:
          mailbox[{in.peer, 0, in.stage + 1, in.microbatch, r}] = t + send_cost(costs.send_act, in.stage);
          wake(in.peer);
          break;
        case Op::SEND_GRAD:
          mailbox[{in.peer, 1, in.stage - 1, in.microbatch, r}] = t + send_cost(costs.send_grad, in.stage);
          wake(in.peer);
          break;
        case Op::RECV_ACT:
        case Op::RECV_GRAD: {
          auto it = mailbox.find({r, in.op == Op::RECV_GRAD, in.stage, in.microbatch, in.peer});
          if (it == mailbox.end()) {
            blocked = true;
          } else {
            t = std::max(t, it->second);
            mailbox.erase(it);
          }
          break;
        }
        case Op::REDUCE_GRADS:
        case Op::REDUCE_TIED: {
          // A collective of the stage's replicas (1F1B-RR), or of the ranks holding tied stages
          // with this rank's replica index; alone it just takes its time.
          const bool tied = in.op == Op::REDUCE_TIED;
          const std::vector<int>& members = tied ? tied_members[replica_of(r)] : replica_members(in.stage);
          const double cost = tied ? costs.tied : costs.reduce;
          if (members.size() == 1) {
            t += cost;
            break;
          }
          const int key = tied ? -1 - replica_of(r) : in.stage;
          Collective& coll = collectives[{key, reductions[r][key]}];
          if (!registered[r]) {
            registered[r] = 1;
            ++coll.arrived;
            coll.ready = std::max(coll.ready, t);
            if (coll.arrived == static_cast<int>(members.size()))  // the last one in wakes the others
              for (int q : members) wake(q);
          }
          if (coll.arrived < static_cast<int>(members.size())) {
            blocked = true;
          } else {
            registered[r] = 0;
            ++reductions[r][key];
            t = coll.ready + cost;
          }
          break;
        }
        case Op::LOAD: break;
        case Op::OPT_STEP: t += costs.opt; break;
      }
      if (blocked) break;
      res.start[r][pc[r]] = begin;
      res.end[r][pc[r]] = t;
      if (is_compute(in.op)) res.busy[r] += t - begin;
      ++pc[r];
    }
  }

  std::vector<std::string> stuck;
  for (int r = 0; r < R; ++r)
    if (pc[r] < p.ranks[r].size()) {
      const Instr& in = p.ranks[r][pc[r]];
      const char* why = in.op == Op::REDUCE_GRADS  ? "a replica never joins the reduction"
                        : in.op == Op::REDUCE_TIED ? "a stage sharing tied layers never joins the reduction"
                                                   : "the matching send is never posted";
      stuck.push_back(fmt::format("rank {} waits at instruction {} `{}` ({})", r, pc[r],
                                  to_text(in), why));
    }
  if (!stuck.empty())
    throw Error(fmt::format("pipeline deadlock in the {} program: {}", p.spec.kind,
                            fmt::join(stuck, "; ")),
                "every receive needs a send that is reachable without waiting on the receiver; "
                "run validate on the program and check the order of its instructions");

  for (int r = 0; r < R; ++r) res.makespan = std::max(res.makespan, now[r]);
  for (int r = 0; r < R; ++r) res.idle.push_back(res.makespan - res.busy[r]);
  res.ideal = R ? *std::max_element(res.busy.begin(), res.busy.end()) : 0;
  res.bubble_fraction = res.ideal > 0 ? (res.makespan - res.ideal) / res.ideal : 0;
  MemoryPeaks peaks = memory_peaks(p);
  res.peak_activations = std::move(peaks.activations);
  res.peak_weight_versions = std::move(peaks.weight_versions);
  return res;
}

}  // namespace baton::pipeline
