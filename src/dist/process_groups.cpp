// make_process_groups: one split per kind of group, coloured by the group's first member; see
// process_groups.h.
#include "dist/process_groups.h"

#include <algorithm>

#include "core/error.h"

namespace baton::dist {

std::unique_ptr<Comm> split_group(Comm& world, const std::vector<int>& members) {
  const int r = world.rank();
  const auto it = std::find(members.begin(), members.end(), r);
  if (it == members.end()) {
    // Not a member of any group of this kind: a group of its own, discarded. Colours of real
    // groups are their first member; world.size() + r never collides with one.
    world.split(world.size() + r, 0);
    return nullptr;
  }
  return world.split(members.front(), static_cast<int>(it - members.begin()));
}

ProcessGroups make_process_groups(Comm& world, const Layout& layout, const std::vector<int>& tied_layers) {
  BATON_REQUIRE(world.size() == layout.world(),
                fmt::format("{} ranks were launched but the layout {} needs {}", world.size(),
                            layout.describe(), layout.world()),
                fmt::format("launch {} ranks (mpirun -np {}), or change parallel.tp / parallel.pp "
                            "so that tp x pp divides the number of ranks",
                            layout.world(), layout.world()));
  const int r = world.rank();
  ProcessGroups pg;
  pg.world = &world;
  pg.tp = split_group(world, layout.tp_ranks(r));
  pg.dp = split_group(world, layout.dp_ranks(r));
  pg.pp = split_group(world, layout.pipe_ranks(r));
  pg.replica = split_group(world, layout.replica_ranks(r));
  pg.tied = split_group(world, tied_layers.empty() ? std::vector<int>{} : layout.tied_ranks(r, tied_layers));
  pg.group = split_group(world, layout.group_ranks(r));
  return pg;
}

}  // namespace baton::dist
