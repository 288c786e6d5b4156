// agree_on_problems; see agree.h.
#include "dist/agree.h"

#include <fmt/format.h>

#include "core/error.h"

namespace baton::dist {

void agree_on_problems(Comm& world, const std::string& mine, const std::string& hint) {
  if (world.size() == 1) {
    if (!mine.empty()) throw Error(mine, hint);
    return;
  }
  const double first = world.all_reduce_scalar(mine.empty() ? 1e9 : world.rank(), ReduceOp::MIN);
  if (first >= 1e9) return;
  const int who = static_cast<int>(first);
  const std::string what = world.broadcast_string(mine, who);
  throw AgreedError(who == 0 ? what : fmt::format("rank {}: {}", who, what), hint);
}

}  // namespace baton::dist
