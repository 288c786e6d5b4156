// hetero.cluster + hetero.policy -> virtual workers and Nm (hetero_cluster.h).
#include "app/hetero_cluster.h"

#include <fmt/format.h>

#include "app/hetpipe_plan.h"
#include "core/error.h"
#include "plan/cluster.h"

namespace baton::app {
namespace {

struct Derived {
  HetpipePlan plan;
  HeteroLayout layout;
};

Derived derive(const Config& cfg, int world_size) {
  const HeteroConfig& h = cfg.hetero;
  BATON_REQUIRE(!h.cluster.empty(), "hetero.cluster is not set: there is no cluster to derive virtual workers from",
                "set hetero.cluster to a cluster file (configs/clusters/), or give hetero.virtual_workers");
  BATON_REQUIRE(h.virtual_workers.empty(),
                fmt::format("hetero.cluster = \"{}\" and hetero.virtual_workers are both given", h.cluster),
                "give one of them: the cluster file (the planner derives the virtual workers) or the virtual "
                "workers (`baton plan --algorithm hetpipe` prints them for a cluster)");
  const plan::Cluster cl = plan::load_cluster(h.cluster);
  BATON_REQUIRE(cl.total_gpus() == world_size,
                fmt::format("hetero.cluster = \"{}\" has {} GPUs, but the job has {} rank{}", h.cluster,
                            cl.total_gpus(), world_size, world_size == 1 ? "" : "s"),
                fmt::format("one rank runs each GPU of the cluster: launch mpirun -n {}, or describe the {} GPUs "
                            "the job has in the cluster file",
                            cl.total_gpus(), world_size));
  const std::string policy = h.policy.empty() ? "hd" : h.policy;
  const bool nm_set = cfg.origins.count("hetero.nm") > 0;
  const Chain ch = make_chain(cfg, "", cl, "hetero.cluster");
  Derived d;
  try {
    d.plan = plan_hetpipe(ch, cl, policy, 0, nm_set ? h.nm : 0, {.nm_bound = nm_search_bound(cfg.train.steps)});
  } catch (const Error& e) {
    throw Error(fmt::format("hetero.policy = \"{}\" on hetero.cluster = \"{}\": {}", policy, h.cluster, e.what()),
                fmt::format("{}; np needs every node to have the GPUs of the first, ed one GPU per node in each "
                            "virtual worker, hd an even number of nodes in pairs (HetPipe §8.1, Table 3)",
                            e.hint().empty() ? "choose another hetero.policy" : e.hint()));
  }
  for (size_t v = 0; v < d.plan.vws.size(); ++v) {
    const HetpipeVw& w = d.plan.vws[v];
    BATON_REQUIRE(w.plan.feasible,
                  fmt::format("hetero.cluster = \"{}\", policy {}: virtual worker {} ({}) fits no partition of {} "
                              "in memory at Nm = {}",
                              h.cluster, policy, v, w.label, ch.label, d.plan.nm),
                  nm_set ? "lower hetero.nm or train.micro_batch, or choose another hetero.policy"
                         : "lower train.micro_batch, or choose another hetero.policy "
                           "(`baton plan --algorithm hetpipe` shows each virtual worker's memory)");
  }
  d.layout = hetero_layout(d.plan, ch, cl);
  return d;
}

}  // namespace

std::vector<std::string> derive_virtual_workers(const Config& cfg, int world_size) {
  return derive(cfg, world_size).layout.virtual_workers;
}

int derive_nm(const Config& cfg, int world_size) { return derive(cfg, world_size).plan.nm; }

}  // namespace baton::app
