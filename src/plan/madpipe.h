// MadPipe (Beaumont, Eyraud-Dubois, Shilova; notes-hetpipe-madpipe §C.1, §C.3): memory-aware
// pipeline partitioning with P − 1 "normal" GPUs holding one stage each and one "special" GPU that
// may hold several stages, for a chain of L layers on P GPUs of memory M linked at bandwidth β.
//
// Memory of a normal stage k..l storing g activations (§C.3, 1-based layers, a_0 = the input):
//   ℳ(k, l, g) = Σ_{i=k..l} (3·W_i + g·a_{i−1}) + 2·(a_{k−1} + a_l)
// (two weight versions and a gradient buffer, PipeDream-2BW; the stored inputs of every layer; a
// 2a buffer on both sides of each cut, dropped at the ends of the chain). With U(k, l) the stage's
// forward + backward time, C(i) = 2a_i/β and V a lower bound on the delay between F_l and B_l,
// g(k, l, V) = ⌈(V + U(k, l)) / T̂⌉, and the DP over T(l, p, t_P, m_P, V) is
//   normal : max(U(k,l), C(k−1), T(k−1, p−1, t_P, m_P, V′))      if ℳ(k,l,g) ≤ M
//   special: max(t_P′, C(k−1), T(k−1, p, t_P′, m_P′, V′))        if m_P′ ≤ M
//   with t_P′ = t_P + U(k,l), m_P′ = m_P + ℳ(k,l,g−1), V′ = (V ⊕ U(k,l)) ⊕ C(k−1),
//   x ⊕ y = x + y if ⌈x/T̂⌉ = ⌈(x+y)/T̂⌉ else T̂·⌈x/T̂⌉ + y,
//   T(0, p, t_P, ·, ·) = t_P;  T(l, 0, t_P, m_P, V) = U(1,l) + t_P if m_P + ℳ(1,l,g(1,l,V)−1) ≤ M.
// The digest prints C(k) in V′; the cut before stage k carries a_{k−1}, so we use C(k−1) as the
// normal/special terms do. Discretisation (§C.3): m_P on `grid_m` values in [0, M], V on `grid_v`
// in [0, U(1,L) + Σ C], t_P on `grid_t` in [0, U(1,L)]; a value is rounded *up* to its grid (so a
// plan the DP accepts satisfies the exact constraints). Answer: MadPipe-DP(T̂) = T(L, P−1, 0, 0, 0).
//
// Algorithm 1 (the period search) bisects T̂ between lb = U(1,L)/P and ub = U(1,L) + Σ C for K
// iterations and returns the best max(MadPipe-DP(T̂), T̂). We follow the prose (min(T_i, T̂_i) is
// a lower bound) where the printed line 7 reads min(T_i, T̃_i).
// Phase 2 (§C.4, an ILP over the N phase-1 stages) is replaced by the pipeline simulator:
// `madpipe_check` builds MadPipe's own schedule for the phase-1 stages — the 1f1b-star program of
// src/pipeline (generate_1f1b_star) for the chain of N stages with loads U(s) and cuts
// C = 2a_s/β, one simulated rank per stage — simulates it (forward U/3, backward 2U/3, a_s/β per
// message) and takes from the simulation the steady-state period and each stage's peak stored
// activations g_s. Memory per GPU is ℳ(k, l, g_s) for a normal GPU and, for the special GPU,
// Σ over its stages of ℳ(k, l, g_s) — the "all forwards, then all backwards" bound of §C.3, so
// never an under-estimate (phase 1 under-estimates it as ℳ(k, l, g − 1)). The achieved period is
// max(simulated period, the special GPU's load Σ U, the largest cut). If a GPU does not fit, the
// schedule's period T is raised to the next value at which a 1F1B* group changes (a contiguous sum
// of resource loads), which stores fewer activations, until every GPU fits (or T reaches the
// sequential U(1,L) + ΣC: infeasible).
#pragma once
#include <vector>

namespace baton::plan {

struct MpLayer {
  double u = 0;            // u_F + u_B, seconds
  double weight_bytes = 0; // W_l
  double out_bytes = 0;    // a_l
};

struct MpProblem {
  std::vector<MpLayer> layers;  // layer l (1-based in the formulas) is layers[l − 1]
  double input_bytes = 0;       // a_0
  int P = 2;
  double memory = 0;            // M, bytes per GPU
  double beta = 1;              // bytes per second between any two GPUs
  int grid_m = 11, grid_v = 51, grid_t = 101;
};

struct MpStage {
  int first = 1, last = 1;  // 1-based layers
  bool special = false;
  int activations = 0;      // g used by the DP for this stage
};

struct MpPlan {
  bool feasible = false;
  double period = 0;              // MadPipe-DP(T̂) (or, from Algorithm 1, max(DP(T̂), T̂))
  double target = 0;              // the T̂ it was computed for
  std::vector<MpStage> stages;    // in layer order
};

// Helpers shared with the tests (1-based layer indices).
struct MpModel {
  const MpProblem& pb;
  std::vector<double> pu, a;  // prefix sums of u (pu[l] = U(1,l)); a[i] for i = 0..L
  explicit MpModel(const MpProblem& p);
  int L() const { return static_cast<int>(a.size()) - 1; }
  double U(int k, int l) const { return pu[l] - pu[k - 1]; }
  double C(int i) const;                    // 2a_i/β for a cut after layer i (0 for i ∈ {0, L})
  double mem(int k, int l, int g) const;    // ℳ(k, l, g)
  static int groups(double x, double T);    // ⌈x / T⌉ (with a relative tolerance)
  static double oplus(double x, double y, double T);
  double v_max() const;                     // U(1,L) + Σ C
  // Grid rounding (up): value -> index, and index -> value.
  int up_t(double t) const;
  int up_m(double m) const;                 // grid_m when above M (infeasible)
  int up_v(double v) const;
  double t_of(int i) const;
  double m_of(int i) const;
  double v_of(int i) const;
};

MpPlan madpipe_dp(const MpProblem& pb, double target);

struct MpCheck {
  bool fits = false;              // every GPU within M under the checked schedule
  double phase1_period = 0;       // the plan's (phase-1) period
  double period = 0;              // achieved: max(simulated, special GPU load, largest cut)
  double simulated_period = 0;    // steady-state period of the simulated 1f1b-star program
  double schedule_T = 0;          // the T the 1F1B* groups were formed with
  double special_load = 0;        // Σ U over the special GPU's stages
  std::vector<int> activations;   // per stage: peak stored activations in the simulation
  std::vector<double> stage_memory;  // per stage: ℳ(k, l, activations)
  std::vector<int> gpu_of_stage;  // per stage: its GPU (normal GPUs 0.. in stage order, special last)
  std::vector<double> gpu_memory; // per GPU that holds a stage
};
// Phase 2 replaced by simulation (see above). `plan` must be feasible.
MpCheck madpipe_check(const MpProblem& pb, const MpPlan& plan);
MpPlan madpipe_search(const MpProblem& pb, int iterations = 10);

}  // namespace baton::plan
