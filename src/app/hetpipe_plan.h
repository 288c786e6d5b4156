// HetPipe on a cluster for a config's model (notes-hetpipe-madpipe §A.2, §A.5–A.6): virtual workers
// formed by a policy (plan/hetpipe.h hetpipe_allocate), each one's Max_m, Nm, and each one's
// partition at that Nm (hetpipe_partition) with its predicted minibatches/s. One function for
// `baton plan --algorithm hetpipe` and for hetero.cluster in `baton train` (app/hetero_cluster.h),
// so both derive the same virtual workers.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "app/plan_chain.h"
#include "app/plan_snippet.h"
#include "plan/cluster.h"
#include "plan/hetpipe.h"

namespace baton::app {

struct HetpipeVw {
  plan::VirtualWorker vw;  // the node of each of its GPUs, in pipeline order
  std::string label;       // "VRGQ"
  int max_m = 0;           // Max_m, at most HetpipePlan::nm_bound; 0 = no partition fits even at Nm = 1
  plan::HpProblem problem;  // at the plan's Nm
  plan::HpPlan plan;        // at the plan's Nm (feasible = false when it does not fit)
  double minibatches_per_s = 0;  // hetpipe_minibatches_per_s (0 when it does not fit)
};

struct HetpipePlan {
  std::string policy;
  int k = 0;        // GPUs per VW
  int nm = 0;       // Nm, the same in every VW (HetPipe §4)
  bool nm_given = false;
  // Nm not given: the smallest Max_m (HetPipe §4) when memory bounds it below nm_bound; when no
  // VW's memory does (Max_m = the search bound: a small model on large devices), best_nm — else one
  // wave would span the whole run and the VWs would meet only at its end (memory_binds false).
  bool memory_binds = true;
  int nm_bound = 0;  // Max_m is searched up to this (HetpipeLimits::nm_bound)
  // The Nm in 1 .. the smallest Max_m with the most predicted throughput (the smaller on ties)
  // and that throughput: the paper chooses Nm ≤ Max_m "for throughput" (§4, Figure 4).
  int best_nm = 1;
  double best_minibatches_per_s = 0;
  std::vector<HetpipeVw> vws;
  int feasible() const;
  // Under WSP every VW's clock stays within D waves of the slowest one, so in the long run every VW
  // runs at the slowest VW's pace: the VWs that fit × the slowest one's minibatches/s (pushes,
  // pulls and waiting not counted).
  double minibatches_per_s() const;
  // Each VW at its own pace (the sum): what the VWs would do without synchronisation.
  double unsynchronised_minibatches_per_s() const;
};

// Max_m's search bound (hetpipe_max_m): the run's length, at most this. Not a memory model — Max_m
// is whatever memory allows (no multiple of k: HetPipe Table 4 runs Nm = 5 on k = 2) — but a
// wave of Nm minibatches longer than the run means nothing, and beyond ~1000 minibatches in flight
// (local staleness Nm − 1) a plan is of no use.
inline constexpr int kMaxNmSearch = 1024;

struct HetpipeLimits {
  int nm_bound = kMaxNmSearch;  // search Max_m up to this (callers: min(train.steps, kMaxNmSearch))
  double gpu_memory_bytes = 0;  // > 0: every GPU's memory for the partition (default: the device's
                                // memory less the cost model's overhead, usable_bytes)
};

// `policy`: np | ed | hd; `k` GPUs per VW (0: node 0's GPU count); `nm` > 0 fixes Nm, 0 takes the
// smallest Max_m among the VWs that fit (HetPipe §4: "Nm ... is set to the minimum Max_m among all
// VWs"), each Max_m the largest Nm at which the trainer's memory (pipeline/stage_memory.h) of some
// partition fits every GPU. Layers get each GPU's device time, the intra-node bandwidth is the
// smallest of the VW's nodes' and the inter-node one the smallest node network bandwidth. Throws
// Error for a policy the cluster's shape does not allow; a VW that fits nowhere has max_m = 0
// (callers decide).
HetpipePlan plan_hetpipe(const Chain& ch, const plan::Cluster& cl, const std::string& policy, int k, int nm,
                         const HetpipeLimits& limits = {});

// The bound for a config: min(train.steps, kMaxNmSearch) (train.steps ≤ 0: kMaxNmSearch).
int nm_search_bound(int64_t steps);

// The plan's VWs for the runtime: devices by their device-table names, layer boundaries as the
// runtime's global layers (the chain's), ranks 0.. in VW order (plan_snippet.h hetpipe_layout).
HeteroLayout hetero_layout(const HetpipePlan& p, const Chain& ch, const plan::Cluster& cl);

}  // namespace baton::app
