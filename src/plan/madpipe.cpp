// MadPipe phase 1: the DP with one special GPU and its discretisation, and Algorithm 1 (madpipe.h).
#include "plan/madpipe.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <unordered_map>

#include "core/error.h"
#include "pipeline/lower.h"
#include "pipeline/schedules.h"
#include "pipeline/simulate.h"

namespace baton::plan {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kTol = 1e-9;
}  // namespace

MpModel::MpModel(const MpProblem& p) : pb(p) {
  const int L = static_cast<int>(p.layers.size());
  pu.assign(L + 1, 0);
  a.assign(L + 1, 0);
  a[0] = p.input_bytes;
  for (int l = 1; l <= L; ++l) {
    pu[l] = pu[l - 1] + p.layers[l - 1].u;
    a[l] = p.layers[l - 1].out_bytes;
  }
}

double MpModel::C(int i) const { return (i <= 0 || i >= L()) ? 0 : 2 * a[i] / pb.beta; }

double MpModel::mem(int k, int l, int g) const {
  double m = 0;
  for (int i = k; i <= l; ++i) m += 3 * pb.layers[i - 1].weight_bytes + g * a[i - 1];
  if (k > 1) m += 2 * a[k - 1];
  if (l < L()) m += 2 * a[l];
  return m;
}

int MpModel::groups(double x, double T) {
  return static_cast<int>(std::ceil(x / T * (1 - kTol)));
}

double MpModel::oplus(double x, double y, double T) {
  return groups(x, T) == groups(x + y, T) ? x + y : T * groups(x, T) + y;
}

double MpModel::v_max() const {
  double v = pu[L()];
  for (int i = 1; i < L(); ++i) v += C(i);
  return v;
}

namespace {
int up(double x, double hi, int n) {
  if (hi <= 0 || x <= 0) return 0;
  return static_cast<int>(std::ceil(x / hi * (n - 1) * (1 - kTol)));
}
}  // namespace

int MpModel::up_t(double t) const { return std::min(up(t, pu[L()], pb.grid_t), pb.grid_t - 1); }
int MpModel::up_m(double m) const { return up(m, pb.memory, pb.grid_m); }
int MpModel::up_v(double v) const { return std::min(up(v, v_max(), pb.grid_v), pb.grid_v - 1); }
double MpModel::t_of(int i) const { return pu[L()] * i / (pb.grid_t - 1); }
double MpModel::m_of(int i) const { return pb.memory * i / (pb.grid_m - 1); }
double MpModel::v_of(int i) const { return v_max() * i / (pb.grid_v - 1); }

MpPlan madpipe_dp(const MpProblem& pb, double T) {
  BATON_REQUIRE(!pb.layers.empty() && pb.P >= 1 && T > 0 && pb.memory > 0 && pb.beta > 0,
                "MadPipe needs layers, P >= 1, a positive period, memory and bandwidth", "");
  const MpModel md(pb);
  const int L = md.L();
  struct Choice { double value; int k; bool special; int g; };
  std::unordered_map<uint64_t, Choice> memo;
  auto key = [&](int l, int p, int ti, int mi, int vi) {
    return ((((uint64_t(l) * 64 + p) * 1024 + ti) * 1024 + mi) * 1024) + vi;
  };
  // Returns T(l, p, t_P, m_P, V) on grid indices; fills memo with the argmin.
  std::function<double(int, int, int, int, int)> rec = [&](int l, int p, int ti, int mi, int vi) {
    const double tP = md.t_of(ti), mP = md.m_of(mi), V = md.v_of(vi);
    if (l == 0) return tP;
    const uint64_t kk = key(l, p, ti, mi, vi);
    if (auto it = memo.find(kk); it != memo.end()) return it->second.value;
    Choice best{kInf, 0, false, 0};
    if (p == 0) {  // everything left goes to the special GPU
      const int g = MpModel::groups(V + md.U(1, l), T);
      if (mP + md.mem(1, l, std::max(g - 1, 0)) <= pb.memory * (1 + kTol))
        best = {md.U(1, l) + tP, 1, true, std::max(g - 1, 0)};
    } else {
      for (int k = l; k >= 1; --k) {
        const double Ukl = md.U(k, l);
        const int g = MpModel::groups(V + Ukl, T);
        const int vi2 = md.up_v(MpModel::oplus(MpModel::oplus(V, Ukl, T), md.C(k - 1), T));
        // Normal GPU.
        if (md.mem(k, l, g) <= pb.memory * (1 + kTol)) {
          const double v = std::max({Ukl, md.C(k - 1), rec(k - 1, p - 1, ti, mi, vi2)});
          if (v < best.value) best = {v, k, false, g};
        }
        // Special GPU.
        const int mi2 = md.up_m(mP + md.mem(k, l, std::max(g - 1, 0)));
        if (mi2 < pb.grid_m) {
          const int ti2 = md.up_t(tP + Ukl);
          const double v = std::max({md.t_of(ti2), md.C(k - 1), rec(k - 1, p, ti2, mi2, vi2)});
          if (v < best.value) best = {v, k, true, std::max(g - 1, 0)};
        }
      }
    }
    memo[kk] = best;
    return best.value;
  };
  MpPlan plan;
  plan.target = T;
  plan.period = rec(L, pb.P - 1, 0, 0, 0);
  plan.feasible = plan.period < kInf;
  if (!plan.feasible) return plan;
  // Backtrack along the same (rounded) states.
  int l = L, p = pb.P - 1, ti = 0, mi = 0, vi = 0;
  while (l > 0) {
    const Choice c = memo.at(key(l, p, ti, mi, vi));
    plan.stages.insert(plan.stages.begin(), {c.k, l, c.special, c.special ? c.g + 1 : c.g});
    if (p == 0) break;
    const double tP = md.t_of(ti), mP = md.m_of(mi), V = md.v_of(vi), Ukl = md.U(c.k, l);
    vi = md.up_v(MpModel::oplus(MpModel::oplus(V, Ukl, T), md.C(c.k - 1), T));
    if (c.special) {
      mi = md.up_m(mP + md.mem(c.k, l, c.g));
      ti = md.up_t(tP + Ukl);
    } else {
      --p;
    }
    l = c.k - 1;
  }
  return plan;
}

MpPlan madpipe_search(const MpProblem& pb, int K) {
  const MpModel md(pb);
  double lb = md.U(1, md.L()) / pb.P, ub = md.v_max(), T = lb;
  MpPlan best;
  best.period = kInf;
  for (int i = 0; i < K; ++i) {
    MpPlan p = madpipe_dp(pb, T);
    const double Ti = p.period, Tt = std::max(Ti, T);
    if (p.feasible && Tt < best.period) {
      best = p;
      best.period = Tt;
    }
    lb = std::max(lb, std::min(Ti, T));  // the prose's lower bound min(T_i, T̂_i)
    ub = std::min(ub, Tt);
    T = (lb + ub) / 2;
  }
  return best;
}

MpCheck madpipe_check(const MpProblem& pb, const MpPlan& plan) {
  BATON_REQUIRE(plan.feasible && !plan.stages.empty(), "madpipe_check needs a feasible phase-1 plan",
                "raise the memory or the number of GPUs");
  const MpModel md(pb);
  const int N = static_cast<int>(plan.stages.size());
  std::vector<double> U(N), cut(N > 1 ? N - 1 : 0), msg(N, 0.0);
  MpCheck out;
  out.phase1_period = plan.period;
  int normal = 0;
  bool any_special = false;
  out.gpu_of_stage.resize(N);
  for (int s = 0; s < N; ++s) {
    const auto& st = plan.stages[s];
    U[s] = md.U(st.first, st.last);
    if (s + 1 < N) {
      cut[s] = md.C(st.last);
      msg[s] = md.a[st.last] / pb.beta;  // one direction of the cut
    }
    if (st.special) {
      out.special_load += U[s];
      any_special = true;
    } else {
      out.gpu_of_stage[s] = normal++;
    }
  }
  for (int s = 0; s < N; ++s)
    if (plan.stages[s].special) out.gpu_of_stage[s] = normal;
  const int gpus = normal + (any_special ? 1 : 0);
  const double max_u = *std::max_element(U.begin(), U.end());
  const double max_c = cut.empty() ? 0 : *std::max_element(cut.begin(), cut.end());

  // Candidate periods: the phase-1 period, then every contiguous sum of resource loads above it
  // (the values at which a 1F1B* group boundary moves).
  std::vector<double> res;
  for (int s = 0; s < N; ++s) {
    res.push_back(U[s]);
    if (s + 1 < N) res.push_back(cut[s]);
  }
  const double T0 = std::max({plan.period, max_u, max_c});
  std::vector<double> Ts{T0};
  for (size_t i = 0; i < res.size(); ++i) {
    double sum = 0;
    for (size_t j = i; j < res.size(); ++j) {
      sum += res[j];
      if (sum > T0 * (1 + 1e-12)) Ts.push_back(sum);
    }
  }
  std::sort(Ts.begin(), Ts.end());
  Ts.erase(std::unique(Ts.begin(), Ts.end(), [](double a, double b) { return b <= a * (1 + 1e-12); }),
           Ts.end());

  pipeline::Costs costs;
  for (int s = 0; s < N; ++s) costs.stage.push_back({U[s] / 3, 2 * U[s] / 3, 0});
  costs.send_act = msg;
  costs.send_grad = msg;
  for (double T : Ts) {
    const std::vector<int> g = pipeline::one_f_one_b_star_in_flight(U, cut, T);
    const int gmax = *std::max_element(g.begin(), g.end());
    // Long enough runs that the difference is taken in the periodic regime (the transient can
    // last tens of micro-batches when ranks have slack); a rank cannot beat its own load.
    const int m1 = 16 * (gmax + N), m2 = 2 * m1;
    std::vector<int> peaks;
    auto makespan = [&](int m) {
      const auto prog = pipeline::lower(pipeline::generate_1f1b_star(
          {.kind = "1f1b-star", .pp = N, .microbatches = m}, g));
      const auto r = pipeline::simulate(prog, costs);
      if (peaks.empty()) peaks = r.peak_activations;
      return r.makespan;
    };
    const double mk1 = makespan(m1);
    out.simulated_period = std::max((makespan(m2) - mk1) / (m2 - m1), max_u);
    out.schedule_T = T;
    out.activations = peaks;
    out.stage_memory.assign(N, 0);
    out.gpu_memory.assign(gpus, 0);
    for (int s = 0; s < N; ++s) {
      out.stage_memory[s] = md.mem(plan.stages[s].first, plan.stages[s].last, peaks[s]);
      out.gpu_memory[out.gpu_of_stage[s]] += out.stage_memory[s];
    }
    out.period = std::max({out.simulated_period, out.special_load, max_c});
    out.fits = std::all_of(out.gpu_memory.begin(), out.gpu_memory.end(),
                           [&](double m) { return m <= pb.memory * (1 + kTol); });
    if (out.fits) break;
  }
  return out;
}

}  // namespace baton::plan
