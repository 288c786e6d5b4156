// HetPipe's virtual workers, Nm and partitions for a config's model (hetpipe_plan.h).
#include "app/hetpipe_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace baton::app {
namespace {

plan::HpProblem vw_problem(const Chain& ch, const plan::Cluster& cl, const plan::VirtualWorker& vw, int nm,
                           const HetpipeLimits& limits) {
  plan::HpProblem pb;
  pb.nm = nm;
  pb.intra_bw = pb.inter_bw = 1e30;
  for (int n : vw.node) {
    const auto& node = cl.nodes[n];
    pb.gpus.push_back({limits.gpu_memory_bytes > 0 ? limits.gpu_memory_bytes : usable_bytes(node.device, ch.A), n});
    pb.intra_bw = std::min(pb.intra_bw, node.intra_gbs * 1e9);
    pb.inter_bw = std::min(pb.inter_bw, node.inter_gbs * 1e9);
  }
  auto bytes = [](double b) { return static_cast<size_t>(std::llround(b)); };
  for (int l = 0; l < ch.md.size(); ++l) {
    const plan::LayerDesc& d = ch.md.layers[l];
    plan::HpLayer hl;
    for (int n : vw.node) hl.time.push_back(ch.fb(l, cl.nodes[n].device));
    hl.out_bytes = d.out_bytes;
    hl.bytes = {.param_floats = bytes(d.param_floats), .buffer_floats = bytes(d.buffer_floats),
                .saved = bytes(d.stash_bytes), .in = bytes(d.in_bytes), .out = bytes(d.out_bytes),
                .work = bytes(d.work_bytes)};
    pb.layers.push_back(hl);
  }
  pb.memory = {.input_bytes = bytes(ch.md.input_bytes), .target_bytes = bytes(ch.md.target_bytes),
               .act_size = ch.act_size, .metrics = ch.md.metrics, .optimizer_states = ch.optimizer_states};
  return pb;
}

}  // namespace

int HetpipePlan::feasible() const {
  return static_cast<int>(std::count_if(vws.begin(), vws.end(), [](const HetpipeVw& v) { return v.plan.feasible; }));
}

double HetpipePlan::minibatches_per_s() const {
  double slowest = 0;
  bool any = false;
  for (const HetpipeVw& v : vws)
    if (v.plan.feasible) slowest = any ? std::min(slowest, v.minibatches_per_s) : v.minibatches_per_s, any = true;
  return feasible() * slowest;
}

double HetpipePlan::unsynchronised_minibatches_per_s() const {
  double t = 0;
  for (const HetpipeVw& v : vws) t += v.minibatches_per_s;
  return t;
}

namespace {

// Every VW partitioned at `nm`.
void partition_at(HetpipePlan& p, int nm) {
  p.nm = nm;
  for (HetpipeVw& v : p.vws) {
    v.problem.nm = nm;
    v.plan = plan::hetpipe_partition(v.problem);
    v.minibatches_per_s = plan::hetpipe_minibatches_per_s(v.problem, v.plan);
  }
}

}  // namespace

int nm_search_bound(int64_t steps) {
  return steps > 0 ? static_cast<int>(std::min<int64_t>(steps, kMaxNmSearch)) : kMaxNmSearch;
}

HetpipePlan plan_hetpipe(const Chain& ch, const plan::Cluster& cl, const std::string& policy, int k, int nm,
                         const HetpipeLimits& limits) {
  BATON_REQUIRE(policy == "np" || policy == "ed" || policy == "hd", fmt::format("unknown HetPipe policy '{}'", policy),
                "use np, ed or hd (HetPipe §8.1, Table 3)");
  HetpipePlan p;
  p.policy = policy;
  p.k = k > 0 ? k : cl.nodes[0].gpus;
  p.nm_bound = std::max(1, limits.nm_bound);
  p.nm_given = nm > 0;
  for (const plan::VirtualWorker& vw : plan::hetpipe_allocate(cl, policy, p.k)) {
    HetpipeVw v;
    v.vw = vw;
    v.label = plan::vw_label(cl, vw);
    v.problem = vw_problem(ch, cl, vw, 1, limits);
    v.max_m = plan::hetpipe_max_m(v.problem, p.nm_bound);
    p.vws.push_back(std::move(v));
  }
  int smallest = 0;  // the smallest Max_m of the VWs that fit (0 when none does)
  for (const HetpipeVw& v : p.vws)
    if (v.max_m > 0) smallest = smallest == 0 ? v.max_m : std::min(smallest, v.max_m);
  // The Nm ≤ the smallest Max_m with the most predicted throughput (ties: the smaller Nm, less
  // staleness): a larger Nm can force a slower partition to fit its stashes. The search stops at the
  // first saturated Nm (Nm / round trip ≥ 1 / slowest partition): beyond it the rate is at most
  // 1 / slowest, and the slowest partition only grows with Nm (the memory constraint only tightens).
  p.best_nm = std::max(smallest, 1);
  double best = -1;
  for (int m = 1; m <= smallest; ++m) {
    partition_at(p, m);
    if (p.minibatches_per_s() > best * (1 + 1e-9)) best = p.minibatches_per_s(), p.best_nm = m;
    bool saturated = true;
    for (const HetpipeVw& v : p.vws)
      if (v.plan.feasible) {
        double round_trip = 0;
        for (double t : v.plan.stage_time) round_trip += t;
        saturated = saturated && m / round_trip >= 1 / v.plan.slowest;
      }
    if (saturated) break;
  }
  p.best_minibatches_per_s = std::max(best, 0.0);
  p.memory_binds = smallest < p.nm_bound;
  partition_at(p, p.nm_given ? nm : p.memory_binds ? std::max(smallest, 1) : p.best_nm);
  return p;
}

HeteroLayout hetero_layout(const HetpipePlan& p, const Chain& ch, const plan::Cluster& cl) {
  std::vector<VwPartition> parts;
  for (const HetpipeVw& v : p.vws) {
    VwPartition part{.label = v.label, .feasible = v.plan.feasible};
    for (size_t q = 0; q < v.vw.node.size(); ++q) {
      part.devices.push_back(cl.nodes[v.vw.node[q]].device.name);
      if (v.plan.feasible) part.first_layer.push_back(v.plan.first_layer[q]);
    }
    parts.push_back(std::move(part));
  }
  return hetpipe_layout(parts, ch.md.size(), p.nm);
}

}  // namespace baton::app
