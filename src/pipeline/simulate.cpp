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

namespace {

// The event simulation (machine model in simulate.h): ranks run from a worklist until they block on
// a receive or a collective; a send wakes its peer, the last member into a collective the others.
class Simulator {
 public:
  Simulator(const Program& p, const Costs& costs) : p_(p), c_(costs), R_(static_cast<int>(p.ranks.size())) {
    res_.busy.assign(R_, 0);
    res_.start.resize(R_);
    res_.end.resize(R_);
    for (int r = 0; r < R_; ++r) {
      res_.start[r].assign(p.ranks[r].size(), 0);
      res_.end[r].assign(p.ranks[r].size(), 0);
    }
    pc_.assign(R_, 0);
    now_.assign(R_, 0);
    reductions_.resize(R_);
    registered_.assign(R_, 0);
    queued_.assign(R_, 1);
    for (int r = 0; r < R_; ++r) work_.push_back(r);
    // The tied ranks reduce together by replica index (replica j of each tied stage).
    for (int r = 0; r < R_; ++r)
      for (int s : p.stages_of(r))
        if (std::count(p.tied_stages.begin(), p.tied_stages.end(), s)) {
          tied_members_[replica_of(r)].push_back(r);
          break;
        }
  }

  SimResult run() {
    while (!work_.empty()) {
      const int r = work_.front();
      work_.pop_front();
      queued_[r] = 0;
      while (pc_[r] < p_.ranks[r].size()) {
        const Instr& in = p_.ranks[r][pc_[r]];
        const double begin = now_[r];
        if (execute(r, in)) break;  // blocked: woken later
        res_.start[r][pc_[r]] = begin;
        res_.end[r][pc_[r]] = now_[r];
        if (is_compute(in.op)) res_.busy[r] += now_[r] - begin;
        ++pc_[r];
      }
    }
    check_deadlock();
    for (int r = 0; r < R_; ++r) res_.makespan = std::max(res_.makespan, now_[r]);
    for (int r = 0; r < R_; ++r) res_.idle.push_back(res_.makespan - res_.busy[r]);
    res_.ideal = R_ ? *std::max_element(res_.busy.begin(), res_.busy.end()) : 0;
    res_.bubble_fraction = res_.ideal > 0 ? (res_.makespan - res_.ideal) / res_.ideal : 0;
    MemoryPeaks peaks = memory_peaks(p_);
    res_.peak_activations = std::move(peaks.activations);
    res_.peak_weight_versions = std::move(peaks.weight_versions);
    return std::move(res_);
  }

 private:
  static double send_cost(const std::vector<double>& v, int stage) {
    return stage < static_cast<int>(v.size()) ? v[stage] : 0.0;
  }
  int replica_of(int r) const { return r - p_.first_rank(p_.stages_of(r).front()); }
  void wake(int r) {
    if (r >= 0 && r < R_ && !queued_[r]) {
      queued_[r] = 1;
      work_.push_back(r);
    }
  }

  // Runs `in` on rank r, advancing its clock; true when it blocks instead.
  bool execute(int r, const Instr& in) {
    double& t = now_[r];
    const StageCost& c = c_.stage[in.stage];
    switch (in.op) {
      case Op::FWD: t += c.f; break;
      case Op::BWD: t += c.b + c.w; break;
      case Op::BWD_INPUT: t += c.b; break;
      case Op::BWD_WEIGHT: t += c.w; break;
      case Op::SEND_ACT:
        mailbox_[{in.peer, 0, in.stage + 1, in.microbatch, r}] = t + send_cost(c_.send_act, in.stage);
        wake(in.peer);
        break;
      case Op::SEND_GRAD:
        mailbox_[{in.peer, 1, in.stage - 1, in.microbatch, r}] = t + send_cost(c_.send_grad, in.stage);
        wake(in.peer);
        break;
      case Op::RECV_ACT:
      case Op::RECV_GRAD: {
        auto it = mailbox_.find({r, in.op == Op::RECV_GRAD, in.stage, in.microbatch, in.peer});
        if (it == mailbox_.end()) return true;
        t = std::max(t, it->second);
        mailbox_.erase(it);
        break;
      }
      case Op::REDUCE_GRADS:
      case Op::REDUCE_TIED: return collective(r, in);
      case Op::OPT_STEP: t += c_.opt; break;
      case Op::LOAD: break;
    }
    return false;
  }

  // REDUCE_GRADS (a collective of the stage's replicas) or REDUCE_TIED (of the ranks holding tied
  // stages with this rank's replica index): it starts when the last member arrives; alone it just
  // takes its time. True while this rank waits.
  bool collective(int r, const Instr& in) {
    const bool tied = in.op == Op::REDUCE_TIED;
    std::vector<int> members = tied ? tied_members_[replica_of(r)] : std::vector<int>{};
    if (!tied)
      for (int j = 0; j < p_.replicas(in.stage); ++j) members.push_back(p_.first_rank(in.stage) + j);
    const double cost = tied ? c_.tied : c_.reduce;
    if (members.size() <= 1) {
      now_[r] += cost;
      return false;
    }
    const int key = tied ? -1 - replica_of(r) : in.stage;
    Collective& coll = collectives_[{key, reductions_[r][key]}];
    if (!registered_[r]) {
      registered_[r] = 1;
      ++coll.arrived;
      coll.ready = std::max(coll.ready, now_[r]);
      if (coll.arrived == static_cast<int>(members.size()))  // the last one in wakes the others
        for (int q : members) wake(q);
    }
    if (coll.arrived < static_cast<int>(members.size())) return true;
    registered_[r] = 0;
    ++reductions_[r][key];
    now_[r] = coll.ready + cost;
    return false;
  }

  void check_deadlock() const {
    std::vector<std::string> stuck;
    for (int r = 0; r < R_; ++r)
      if (pc_[r] < p_.ranks[r].size()) {
        const Instr& in = p_.ranks[r][pc_[r]];
        const char* why = in.op == Op::REDUCE_GRADS  ? "a replica never joins the reduction"
                          : in.op == Op::REDUCE_TIED ? "a stage sharing tied layers never joins the reduction"
                                                     : "the matching send is never posted";
        stuck.push_back(fmt::format("rank {} waits at instruction {} `{}` ({})", r, pc_[r], to_text(in), why));
      }
    if (!stuck.empty())
      throw Error(fmt::format("pipeline deadlock in the {} program: {}", p_.spec.kind, fmt::join(stuck, "; ")),
                  "every receive needs a send that is reachable without waiting on the receiver; "
                  "run validate on the program and check the order of its instructions");
  }

  struct Collective {
    int arrived = 0;
    double ready = 0;
  };
  const Program& p_;
  const Costs& c_;
  const int R_;
  SimResult res_;
  std::vector<size_t> pc_;
  std::vector<double> now_;
  // (receiving rank, is_grad, receiving stage, microbatch, sending rank) -> arrival time
  std::map<std::tuple<int, int, int, int, int>, double> mailbox_;
  std::map<std::pair<int, int>, Collective> collectives_;  // (group key, n-th reduction)
  std::vector<std::map<int, int>> reductions_;             // per rank: group key -> reductions done
  std::vector<char> registered_, queued_;
  std::deque<int> work_;
  std::map<int, std::vector<int>> tied_members_;
};

}  // namespace

SimResult simulate(const Program& p, const Costs& costs) {
  BATON_REQUIRE(p.lowered, "simulate needs a lowered program (with sends and receives)",
                "run pipeline::lower on the generator's program first");
  BATON_REQUIRE(static_cast<int>(costs.stage.size()) == p.num_stages(),
                fmt::format("costs give {} stages, the program has {}", costs.stage.size(),
                            p.num_stages()),
                "give one StageCost per model stage (pp × vp)");
  return Simulator(p, costs).run();
}

}  // namespace baton::pipeline
