// HetPipe (Park et al., ATC'20; notes-hetpipe-madpipe §A.5–A.6): partition a model over the GPUs
// of one virtual worker (VW) — possibly different GPU types — and form VWs from a cluster.
//
// Partitioner (§A.5): contiguous stages, one per GPU of the VW in pipeline order; minimise the
// slowest partition, whose time is its layers' compute on *its* GPU plus the time to receive the
// activations of its input (forward) and the gradient of its output (backward); subject to each
// GPU's memory at Nm concurrent minibatches. The paper solves this with CPLEX and does not give the
// formulation; here it is solved exactly by a dynamic program over (GPU position, layer prefix),
// which is optimal because the objective is a max over stages and the constraints are per stage.
// Memory: what the trainer allocates on that GPU running the stage at Nm — the paper's "memory
// requirement of each partition to process Nm minibatches", which depends on the position ("GPU1
// needs to hold on to the results of the forward pass for all stages", §4) — taken from the one
// formula the runtime is tested against byte for byte (pipeline/stage_memory.h): the weights, their
// gradients, the optimizer's state, the Nm weight versions the hetpipe schedule stashes on every
// stage (minibatch p keeps w_p until its backward, §4), and the activation slots of the stage's
// in-flight minibatches (max(Nm − q, 1) on partition q < k − 1, 1 on the last, which runs a
// minibatch's forward and backward as one task; plus one for evaluation) with their boundary
// buffers, workspace and output buffers (docs/planner.md "HetPipe memory").
//
// Policies (§A.6, Table 3) for k GPUs per VW: NP, one node per VW; ED, one GPU of every node per VW;
// HD, pair the fastest node type with the slowest, the second fastest with the second slowest, ...
// and give each VW k/2 GPUs of each type of its pair.
#pragma once
#include <string>
#include <vector>

#include "pipeline/stage_memory.h"
#include "plan/cluster.h"

namespace baton::plan {

struct HpLayer {
  std::vector<double> time;  // forward + backward seconds of one minibatch, per GPU of the VW
  double out_bytes = 0;      // activation (= gradient) at the cut after this layer
  pipeline::LayerBytes bytes;  // what the trainer allocates for the layer (per minibatch)
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
  pipeline::StageContext memory;      // dtype, optimizer, a minibatch's inputs and targets
};

struct HpPlan {
  bool feasible = false;
  double slowest = 0;              // seconds per minibatch of the slowest partition
  std::vector<int> first_layer;    // partition q runs layers first_layer[q] .. first_layer[q+1]−1
  std::vector<double> stage_time;
  std::vector<pipeline::StageMemory> stage_memory;  // bytes on each GPU (.total())
};

// Exact (DP); every GPU gets at least one layer.
HpPlan hetpipe_partition(const HpProblem& pb);
// Time and memory (bytes, pipeline::stage_memory at pb.nm) of partition q holding layers [i, j]:
// what the DP and tests use; the caller compares the memory with the GPU's.
double hetpipe_stage_time(const HpProblem& pb, int q, int i, int j);
pipeline::StageMemory hetpipe_stage_memory(const HpProblem& pb, int q, int i, int j);

// Max_m (§4: "the maximum number of minibatches executed concurrently in the virtual worker ...
// determined by the memory requirement"): the largest Nm ≤ `bound` at which some partition fits
// every GPU (the partition re-solved per Nm; feasibility only shrinks as Nm grows: a doubling
// search, then a bisection); 0 when none fits even at Nm = 1. Memory is the only limit — no
// multiple of k (Table 4 runs Nm = 5 on k = 2). `bound` is a search bound, not a model: the caller
// passes the run's length (a wave of Nm minibatches longer than the run means nothing). A VW of
// one GPU runs one minibatch at a time (no pipeline; its memory does not grow with Nm): Max_m = 1.
int hetpipe_max_m(HpProblem pb, int bound);
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
