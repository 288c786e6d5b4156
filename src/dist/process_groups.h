// The communicators of one rank, made from the Layout (DESIGN §3: groups are explicit objects,
// never globals). Every member is built by a collective split of the world, in the same order on
// every rank; a rank outside a group (no tied layers, a stage without replicas) gets null there.
#pragma once
#include <memory>
#include <vector>

#include "dist/comm.h"
#include "dist/layout.h"

namespace baton::dist {

struct ProcessGroups {
  Comm* world = nullptr;
  std::unique_ptr<Comm> tp;       // tensor-parallel group (rank = tp rank)
  std::unique_ptr<Comm> dp;       // same place in every data-parallel group (rank = group)
  std::unique_ptr<Comm> pp;       // this rank's pipeline (rank = pipeline rank)
  std::unique_ptr<Comm> replica;  // the replicas of this rank's stage (1F1B-RR; rank = replica)
  std::unique_ptr<Comm> tied;     // the stages sharing tied parameters (Layout::tied_ranks); may be null
  std::unique_ptr<Comm> group;    // every rank of this rank's group (a replica or virtual worker)
};

// Collective over `world` (whose size must be layout.world(); checked first, the same on every
// rank, so a mismatch is an error everywhere and never a rank waiting in a split the others
// skipped). `tied_layers`: global layers that share parameters (empty: no tied group).
ProcessGroups make_process_groups(Comm& world, const Layout& layout,
                                  const std::vector<int>& tied_layers = {});

// A communicator over exactly `members` (world ranks, in the order they get group ranks), made by
// one collective split of `world`: ranks not in `members` must call it too (with their own member
// list: every rank's list is the group it belongs to; null for a rank that belongs to none).
std::unique_ptr<Comm> split_group(Comm& world, const std::vector<int>& members);

}  // namespace baton::dist
