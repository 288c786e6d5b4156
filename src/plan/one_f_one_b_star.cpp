// 1F1B* grouping (one_f_one_b_star.h): one implementation, the schedule generator's
// (pipeline/schedules.h, one_f_one_b_star_in_flight), so the planner's activation counts are the
// generated program's.
#include "plan/one_f_one_b_star.h"

#include "core/error.h"
#include "pipeline/schedules.h"

namespace baton::plan {

std::vector<int> one_f_one_b_star_groups(const std::vector<double>& loads, double T) {
  return pipeline::one_f_one_b_star_in_flight(loads, {}, T);
}

std::vector<int> one_f_one_b_star_activations(const std::vector<double>& stage_loads,
                                              const std::vector<double>& cut_loads, double T) {
  const int P = static_cast<int>(stage_loads.size());
  BATON_ASSERT(static_cast<int>(cut_loads.size()) == P - 1, "cuts {} != P − 1 = {}", cut_loads.size(), P - 1);
  if (P == 1) return pipeline::one_f_one_b_star_in_flight(stage_loads, {}, T);
  return pipeline::one_f_one_b_star_in_flight(stage_loads, cut_loads, T);
}

}  // namespace baton::plan
