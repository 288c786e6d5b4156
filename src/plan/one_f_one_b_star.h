// MadPipe's 1F1B* periodic schedule (Beaumont et al. §4.1; notes-hetpipe-madpipe §C.2): for a
// contiguous partitioning with stage loads U(s) = U_F(s) + U_B(s) and period T, stages are grouped
// from the end — the last stage starts group 1, and earlier stages join the current group while
// its total load stays ≤ T. Every stage of group g stores exactly g input activations, which is
// the least any valid periodic schedule of period T can store (Proposition 1). Communication is
// modelled by inserting each cut as a resource of load C = 2a/β between its stages (2P − 1
// resources), so the first stages may store up to 2P − 1 activations.
#pragma once
#include <vector>

namespace baton::plan {

// Group index (1 = the group of the last stage) of every stage; loads must be ≤ T each.
std::vector<int> one_f_one_b_star_groups(const std::vector<double>& loads, double T);

// With communication: stage loads U(s) and cut loads C(s) between stage s and s + 1 (size
// P − 1). Returns the activations each *stage* stores (its group among the 2P − 1 resources).
std::vector<int> one_f_one_b_star_activations(const std::vector<double>& stage_loads,
                                              const std::vector<double>& cut_loads, double T);

}  // namespace baton::plan
