// check_trainable: what `baton train` and `baton bench` can run today, apart from the config's
// consistency (validate.cpp). Every accepted key takes effect or is refused here with a clear
// error: keys of features that are not built yet are not silently ignored.
#include <string_view>
#include <vector>

#include "config/config.h"
#include "core/error.h"
#include "pipeline/schedules.h"

namespace baton {

void check_trainable(const Config& cfg) {
  BATON_REQUIRE(cfg.hetero == HeteroConfig{},
                "the [hetero] section (HetPipe virtual workers kept in sync by WSP) is not built yet: "
                "the WSP protocol exists, its parameter server and training runtime do not "
                "(docs/hetpipe.md)",
                "remove the [hetero] keys (or leave them at their defaults: sync = \"allreduce\", "
                "staleness = 0, no cluster, no virtual_workers); `baton plan --algorithm hetpipe` "
                "partitions heterogeneous clusters today");
  // PTD-P scatter/gather (notes-dissertation §3) splits what crosses a stage boundary over tp;
  // with sequence parallelism it is split already (Megatron disables scatter/gather there), and
  // without both pipeline and tensor parallelism there is nothing to split. (The planner's configs
  // may set it everywhere, as PTD-P's runs do; training refuses what it cannot honour.)
  const ParallelConfig& p = cfg.parallel;
  BATON_REQUIRE(!p.scatter_gather || (p.pp > 1 && p.tp > 1 && !p.sequence_parallel),
                "parallel.scatter_gather = true needs pp > 1 and tp > 1 without sequence parallelism",
                "scatter/gather splits the activations sent between pipeline stages over the "
                "tensor-parallel ranks; under sequence parallelism they are split already: set "
                "parallel.scatter_gather = false");
  const pipeline::ScheduleTraits& t = pipeline::schedule_traits(cfg.parallel.schedule);
  if (!t.executable) {
    std::vector<std::string_view> runnable;
    for (const pipeline::ScheduleTraits& k : pipeline::schedule_registry())
      if (k.executable) runnable.push_back(k.name);
    throw Error(fmt::format("parallel.schedule = \"{}\" does not train yet: {}", cfg.parallel.schedule,
                            t.summary),
                fmt::format("train with one of {}; `baton schedule` and `baton plan` handle the others",
                            fmt::join(runnable, ", ")));
  }
  // Weight stashing keeps fp32 weight versions and reads them directly; a bf16 copy per version
  // is not built yet.
  BATON_REQUIRE(cfg.precision.compute == "fp32" || t.weight_versions == 1,
                fmt::format("parallel.schedule = \"{}\" (weight stashing) with precision.compute = "
                            "\"bf16\" is not implemented yet", cfg.parallel.schedule),
                "use precision.compute = \"fp32\" with pipedream/2bw, or a flush schedule "
                "(1f1b, interleaved, zb-h1, gpipe) with bf16");
}

}  // namespace baton
