// HetPipe on a cluster for a config's model (notes-hetpipe-madpipe §A.2, §A.5–A.6): virtual workers
// formed by a policy (plan/hetpipe.h hetpipe_allocate), each one's Max_m, Nm, and each one's
// partition at that Nm (hetpipe_partition) with its predicted minibatches/s. One function for
// `baton plan --algorithm hetpipe` and for hetero.cluster in `baton train` (app/hetero_cluster.h),
// so both derive the same virtual workers.
#pragma once
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
  int max_m = 0;           // Max_m, at most HetpipePlan::nm_cap; 0 = no partition fits even at Nm = 1
  plan::HpProblem problem;  // at the plan's Nm
  plan::HpPlan plan;        // at the plan's Nm (feasible = false when it does not fit)
  double minibatches_per_s = 0;  // hetpipe_minibatches_per_s (0 when it does not fit)
};

struct HetpipePlan {
  std::string policy;
  int k = 0;        // GPUs per VW
  int nm = 0;       // Nm, the same in every VW (HetPipe §4)
  bool nm_given = false;
  int nm_cap = 0;   // Max_m is searched up to 2k
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

// `policy`: np | ed | hd; `k` GPUs per VW (0: node 0's GPU count); `nm` > 0 fixes Nm, 0 takes the
// smallest Max_m among the VWs that fit (HetPipe §4: "Nm ... is set to the minimum Max_m among all
// VWs"), Max_m searched up to 2k — HetPipe Table 4's best Nm are at most 2k (e.g. 7 for k = 4);
// beyond, a larger Nm adds local staleness (s_local = Nm − 1) for little throughput. Layers get
// each GPU's device time, the intra-node bandwidth is the smallest of the VW's nodes' and the
// inter-node one the smallest node network bandwidth. Throws Error for a policy the cluster's shape
// does not allow; a VW that fits nowhere has max_m = 0 (callers decide).
HetpipePlan plan_hetpipe(const Chain& ch, const plan::Cluster& cl, const std::string& policy, int k, int nm);

// The plan's VWs for the runtime: devices by their device-table names, layer boundaries as the
// runtime's global layers (the chain's), ranks 0.. in VW order (plan_snippet.h hetpipe_layout).
HeteroLayout hetero_layout(const HetpipePlan& p, const Chain& ch, const plan::Cluster& cl);

}  // namespace baton::app
