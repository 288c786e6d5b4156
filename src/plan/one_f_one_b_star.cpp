// 1F1B* grouping (one_f_one_b_star.h).
#include "plan/one_f_one_b_star.h"

#include "core/error.h"

namespace baton::plan {

std::vector<int> one_f_one_b_star_groups(const std::vector<double>& loads, double T) {
  const int P = static_cast<int>(loads.size());
  std::vector<int> group(P, 0);
  int g = 1;
  double sum = 0;
  for (int s = P - 1; s >= 0; --s) {
    BATON_REQUIRE(loads[s] <= T * (1 + 1e-12),
                  fmt::format("1F1B*: stage {} has load {} above the period {}", s, loads[s], T),
                  "the period must be at least the largest stage load");
    if (sum > 0 && sum + loads[s] > T * (1 + 1e-12)) {  // does not fit: start the next group
      ++g;
      sum = 0;
    }
    sum += loads[s];
    group[s] = g;
  }
  return group;
}

std::vector<int> one_f_one_b_star_activations(const std::vector<double>& stage_loads,
                                              const std::vector<double>& cut_loads, double T) {
  const int P = static_cast<int>(stage_loads.size());
  BATON_ASSERT(static_cast<int>(cut_loads.size()) == P - 1, "cuts {} != P − 1 = {}", cut_loads.size(), P - 1);
  std::vector<double> resources;
  for (int s = 0; s < P; ++s) {
    resources.push_back(stage_loads[s]);
    if (s + 1 < P) resources.push_back(cut_loads[s]);
  }
  const auto g = one_f_one_b_star_groups(resources, T);
  std::vector<int> out(P);
  for (int s = 0; s < P; ++s) out[s] = g[2 * s];
  return out;
}

}  // namespace baton::plan
