// PipeDream's partitioner (Narayanan et al., SOSP'19 §3.1; notes-pipedream §2): a dynamic program
// over a hierarchical topology that splits a chain of layers into stages, replicates stages over
// workers (data parallelism inside the pipeline) and minimises the time of the slowest stage.
//
// Level k has m_k components of level k − 1 joined by links of bandwidth B_k (m_0 = 1). With T_l
// the forward + backward time of layer l, a_l its output bytes and w_l its weight bytes:
//   T^k(i→j, m) = (1/m) · max( A^{k−1}(i→j, m_{k−1}), 2(m − 1) Σ_{l=i..j} w_l / B_k )
//   A^k(i→j, m) = min( T^k(i→j, m),
//                      min_{i≤s<j} min_{1≤m'<m} max( A^k(i→s, m − m'), 2 a_s / B_k, T^k(s+1→j, m') ) )
//   A^0(i→j, 1) = Σ_{l=i..j} T_l
// The first term of A^k — one stage of layers i..j replicated over all m components — is the
// paper's "plain DP is a single replicated stage" (§3); the printed recurrence leaves it implicit
// (its m' < m) and the reference code includes it. A^k(i→j, 1) = T^k(i→j, 1) = A^{k−1}(i→j, m_{k−1}).
// The DP-communication term is the paper's formula as printed (2(m−1)·Σw/B_k, no 1/m inside; see
// notes-pipedream §6). The answer is A^L(0→N−1, m_L); O(Σ_k N³ m_k²) time.
#pragma once
#include <vector>

namespace baton::plan {

struct PdLayer {
  double time = 0;          // T_l: forward + backward seconds on one worker
  double out_bytes = 0;     // a_l
  double weight_bytes = 0;  // w_l
};

struct PdLevel {
  int m = 1;          // components of the level below
  double bw = 1;      // B_k, bytes per second
};

struct PdStage {
  int first = 0, last = 0;  // layers, inclusive
  int replicas = 1;         // workers running this stage (round-robin, 1F1B-RR)
};

struct PdPlan {
  double slowest = 0;            // A^L(0→N−1, m_L): seconds per input of the slowest stage
  std::vector<PdStage> stages;   // flattened over levels, in layer order
  int workers = 1;               // Π m_k
  int noam = 1;                  // ⌈workers / replicas of the input stage⌉ (notes-pipedream §1)
};

// levels[0] is level 1 (e.g. GPUs in a server), levels[1] level 2 (servers), ...
PdPlan pipedream_partition(const std::vector<PdLayer>& layers, const std::vector<PdLevel>& levels);

// The cost of a given flattened plan under the same model, for plans built by hand or by
// enumeration: `nested` gives, per top-level stage, its level-1 sub-stages (2 levels only).
struct PdTwoLevelStage {
  int replicas = 1;                 // level-2 components (servers) replicating this stage
  std::vector<PdStage> sub;         // level-1 pipeline inside one server (replicas in GPUs)
};
double pipedream_cost_two_levels(const std::vector<PdLayer>& layers,
                                 const std::vector<PdLevel>& levels,
                                 const std::vector<PdTwoLevelStage>& plan);

}  // namespace baton::plan
