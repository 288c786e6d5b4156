// HetPipe (Park et al., ATC'20; notes-hetpipe-madpipe §A.5–A.6): partition a model over the GPUs
// of one virtual worker (VW) — possibly different GPU types — and form VWs from a cluster.
//
// Partitioner (§A.5): contiguous stages, one per GPU of the VW in pipeline order; minimise the
// slowest partition, whose time is its layers' compute on *its* GPU plus the time to receive the
// activations of its input (forward) and the gradient of its output (backward); subject to each
// GPU's memory at Nm concurrent minibatches. The paper solves this with CPLEX and does not give the
// formulation; here it is solved exactly by a dynamic program over (GPU position, layer prefix),
// which is optimal because the objective is a max over stages and the constraints are per stage.
// Memory model (our reading of §A.2/§A.5, stated in docs/planner.md): partition q of k holds
// n_q = max(1, Nm − q) minibatches (the last GPU runs forward and backward of a minibatch as one
// task, the first holds every in-flight one), and
//   mem_q = 3 · W_q + n_q · Σ_{l∈q} stash_l
// (weights, the stashed version a minibatch keeps until its backward, and gradients).
//
// Policies (§A.6, Table 3) for k GPUs per VW: NP, one node per VW; ED, one GPU of every node per VW;
// HD, pair the fastest node type with the slowest, the second fastest with the second slowest, ...
// and give each VW k/2 GPUs of each type of its pair.
#pragma once
#include <string>
#include <vector>

#include "plan/cluster.h"

namespace baton::plan {

struct HpLayer {
  std::vector<double> time;  // forward + backward seconds of one minibatch, per GPU of the VW
  double out_bytes = 0;      // activation (= gradient) at the cut after this layer
  double weight_bytes = 0;
  double stash_bytes = 0;    // kept per in-flight minibatch
};

struct HpGpu {
  double memory_bytes = 0;
  int node = 0;              // GPUs of one node talk at intra_bw, others at inter_bw
};

struct HpProblem {
  std::vector<HpLayer> layers;
  std::vector<HpGpu> gpus;   // pipeline order
  int nm = 1;                // concurrent minibatches (Nm)
  double intra_bw = 1, inter_bw = 1;  // bytes per second
};

struct HpPlan {
  bool feasible = false;
  double slowest = 0;              // seconds per minibatch of the slowest partition
  std::vector<int> first_layer;    // partition q runs layers first_layer[q] .. first_layer[q+1]−1
  std::vector<double> stage_time, stage_memory;
};

// Exact (DP); every GPU gets at least one layer.
HpPlan hetpipe_partition(const HpProblem& pb);
// Time and memory of partition q holding layers [i, j] (what the DP and tests use); memory
// +infinity never: the caller compares with the GPU's memory.
double hetpipe_stage_time(const HpProblem& pb, int q, int i, int j);
double hetpipe_stage_memory(const HpProblem& pb, int q, int i, int j);

// Max_m (§A.2: "the maximum number of minibatches that can run at once in a VW", set by memory):
// the largest Nm <= cap at which some partition fits every GPU (the partition re-solved per Nm;
// feasibility only shrinks as Nm grows, so a bisection); 0 when none fits even at Nm = 1.
int hetpipe_max_m(HpProblem pb, int cap);
// Minibatches per second of a VW running `plan` with pb.nm minibatches in flight: at most one per
// slowest partition (the pipeline's steady state) and at most Nm per round trip, the sum of the
// partition times (a minibatch's forward and backward through every GPU with its transfers;
// Little's law for Nm minibatches circulating). WSP's pushes and pulls are not counted.
double hetpipe_minibatches_per_s(const HpProblem& pb, const HpPlan& plan);

struct VirtualWorker {
  std::vector<int> node;  // per GPU: index into Cluster::nodes
};
// The speed ranking of the cluster's nodes (higher = faster): every node's measured
// relative_speed from the cluster file when it gives them (Cluster::measured_speeds), else the
// device table's fp32 peak. HetPipe ranks by measured speed ("in terms of computation power,
// V > R > G > Q", §8.1), which the data-sheet peaks do not reproduce (TITAN RTX has the higher
// peak); configs/clusters/hetpipe.toml gives relative_speed in the paper's order.
std::vector<double> hetpipe_node_speed(const Cluster& c);

// "np" | "ed" | "hd"; throws Error when the cluster's shape does not allow the policy.
// The ranking is used where the paper uses it, in HD only: which node pairs with which, and the
// order of the pairs (fastest first) and of the GPUs in a VW (the faster node's first). NP (one
// node per VW) and ED (one GPU of every node per VW) keep the cluster file's node order, as Table 3
// lists them. No layer time is scaled by it.
// `node_speed` overrides the ranking (one per node, higher = faster; e.g. 1 / profiled step time
// on that GPU); empty: hetpipe_node_speed(c).
std::vector<VirtualWorker> hetpipe_allocate(const Cluster& c, const std::string& policy, int k,
                                            const std::vector<double>& node_speed = {});
// One letter per GPU, the initial of its node's name: "VRGQ", "VVQQ".
std::string vw_label(const Cluster& c, const VirtualWorker& vw);

}  // namespace baton::plan
