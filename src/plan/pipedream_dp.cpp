// PipeDream's hierarchical partitioning DP (pipedream_dp.h).
#include "plan/pipedream_dp.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace baton::plan {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// One level's table: A[i][j][m] and the choice that achieved it.
struct Level {
  int n = 0, M = 0;
  std::vector<double> A;
  std::vector<int> split, mprime;  // split = -1: one replicated stage
  size_t at(int i, int j, int m) const { return (size_t(i) * n + j) * (M + 1) + m; }
};

}  // namespace

PdPlan pipedream_partition(const std::vector<PdLayer>& layers, const std::vector<PdLevel>& levels) {
  const int n = static_cast<int>(layers.size());
  BATON_REQUIRE(n > 0 && !levels.empty(), "PipeDream DP needs layers and at least one level",
                "describe the topology, e.g. GPUs per server then servers");
  std::vector<double> prefix_t(n + 1, 0), prefix_w(n + 1, 0);
  for (int l = 0; l < n; ++l) {
    prefix_t[l + 1] = prefix_t[l] + layers[l].time;
    prefix_w[l + 1] = prefix_w[l] + layers[l].weight_bytes;
  }
  // below(i, j) = A^{k−1}(i→j, m_{k−1}); level 0 is the sum of layer times.
  std::vector<Level> tabs;
  auto below = [&](int k, int i, int j) {
    if (k == 0) return prefix_t[j + 1] - prefix_t[i];
    const Level& L = tabs[k - 1];
    return L.A[L.at(i, j, L.M)];
  };
  for (int k = 0; k < static_cast<int>(levels.size()); ++k) {
    const int M = levels[k].m;
    const double bw = levels[k].bw;
    BATON_REQUIRE(M >= 1 && bw > 0, "PipeDream level needs m >= 1 and bandwidth > 0", "");
    Level L;
    L.n = n;
    L.M = M;
    L.A.assign(size_t(n) * n * (M + 1), kInf);
    L.split.assign(L.A.size(), -1);
    L.mprime.assign(L.A.size(), 0);
    auto T = [&](int i, int j, int m) {
      const double w = prefix_w[j + 1] - prefix_w[i];
      return std::max(below(k, i, j), 2.0 * (m - 1) * w / bw) / m;
    };
    // Increasing j − i so sub-pipelines A^k(i→s, ·) are ready.
    for (int len = 1; len <= n; ++len)
      for (int i = 0; i + len - 1 < n; ++i) {
        const int j = i + len - 1;
        for (int m = 1; m <= M; ++m) {
          const size_t idx = L.at(i, j, m);
          double best = T(i, j, m);
          int bs = -1, bm = 0;
          for (int s = i; s < j; ++s)
            for (int mp = 1; mp < m; ++mp) {
              const double v = std::max({L.A[L.at(i, s, m - mp)], 2.0 * layers[s].out_bytes / bw,
                                         T(s + 1, j, mp)});
              if (v < best) best = v, bs = s, bm = mp;
            }
          L.A[idx] = best;
          L.split[idx] = bs;
          L.mprime[idx] = bm;
        }
      }
    tabs.push_back(std::move(L));
  }

  // Reconstruct: flatten nested replicated sub-pipelines, multiplying replication factors.
  PdPlan plan;
  const int top = static_cast<int>(tabs.size()) - 1;
  struct Rec {
    const std::vector<Level>& tabs;
    std::vector<PdStage>& out;
    void stage(int k, int i, int j, int reps) {  // T^k(i→j, ·) replicated `reps`: level k−1 pipeline
      if (k == 0) {
        out.push_back({i, j, reps});
        return;
      }
      pipe(k - 1, i, j, tabs[k - 1].M, reps);
    }
    void pipe(int k, int i, int j, int m, int reps) {  // A^k(i→j, m)
      const Level& L = tabs[k];
      const size_t idx = L.at(i, j, m);
      if (L.split[idx] < 0) {
        stage(k, i, j, reps * m);
        return;
      }
      pipe(k, i, L.split[idx], m - L.mprime[idx], reps);
      stage(k, L.split[idx] + 1, j, reps * L.mprime[idx]);
    }
  } rec{tabs, plan.stages};
  rec.pipe(top, 0, n - 1, tabs[top].M, 1);
  plan.slowest = tabs[top].A[tabs[top].at(0, n - 1, tabs[top].M)];
  plan.workers = 1;
  for (const auto& lv : levels) plan.workers *= lv.m;
  plan.noam = (plan.workers + plan.stages[0].replicas - 1) / plan.stages[0].replicas;
  return plan;
}

double pipedream_cost_two_levels(const std::vector<PdLayer>& layers,
                                 const std::vector<PdLevel>& levels,
                                 const std::vector<PdTwoLevelStage>& plan) {
  BATON_ASSERT(levels.size() == 2, "two levels");
  auto sum = [&](int i, int j, auto f) {
    double s = 0;
    for (int l = i; l <= j; ++l) s += f(layers[l]);
    return s;
  };
  double worst = 0;
  for (size_t t = 0; t < plan.size(); ++t) {
    const auto& st = plan[t];
    const int i = st.sub.front().first, j = st.sub.back().last;
    double inner = 0;  // A^1 of the sub-pipeline inside one server
    for (size_t u = 0; u < st.sub.size(); ++u) {
      const auto& ss = st.sub[u];
      const double w = sum(ss.first, ss.last, [](const PdLayer& l) { return l.weight_bytes; });
      const double c = sum(ss.first, ss.last, [](const PdLayer& l) { return l.time; });
      inner = std::max(inner, std::max(c, 2.0 * (ss.replicas - 1) * w / levels[0].bw) / ss.replicas);
      if (u + 1 < st.sub.size()) inner = std::max(inner, 2.0 * layers[ss.last].out_bytes / levels[0].bw);
    }
    const double w = sum(i, j, [](const PdLayer& l) { return l.weight_bytes; });
    worst = std::max(worst, std::max(inner, 2.0 * (st.replicas - 1) * w / levels[1].bw) / st.replicas);
    if (t + 1 < plan.size()) worst = std::max(worst, 2.0 * layers[j].out_bytes / levels[1].bw);
  }
  return worst;
}

}  // namespace baton::plan
