// check_trainable: what `baton train` and `baton bench` can run today, apart from the config's
// consistency (validate.cpp). Every accepted key takes effect or is refused here with a clear
// error: keys of features that are not built yet are not silently ignored.
#include <algorithm>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "config/virtual_workers.h"
#include "core/error.h"
#include "pipeline/schedules.h"

namespace baton {
namespace {

// [hetero]: virtual workers of any depth run under WSP, of one stage each under the synchronous
// allreduce baseline (train/hetero/virtual_worker_sync.h), their ranks optionally emulating devices
// (slowdown, memory limit, jitter: config/device_emulation.h), the deterministic mode for VWs of one
// rank under WSP (train/hetero/wsp_turns.h), ED-local placement for VWs of several stages; everything else
// of HetPipe is refused until it is built (docs/hetpipe.md "Not built yet").
void check_hetero_trainable(const Config& cfg) {
  const HeteroConfig& h = cfg.hetero;
  BATON_REQUIRE(h.jitter_span == 1 || h.jitter > 0,
                fmt::format("hetero.jitter_span = {} sets how long a jitter factor lasts, but hetero.jitter = 0",
                            h.jitter_span),
                "set hetero.jitter > 0 (e.g. 1: factors in [1, 2]), or drop hetero.jitter_span");
  BATON_REQUIRE(h.jitter_scope == "rank" || h.jitter > 0,
                fmt::format("hetero.jitter_scope = \"{}\" sets whose compute a jitter factor slows, but hetero.jitter = 0",
                            h.jitter_scope),
                "set hetero.jitter > 0 (e.g. 1: factors in [1, 2]), or drop hetero.jitter_scope");
  BATON_REQUIRE(h.jitter_probability == 1 || h.jitter > 0,
                fmt::format("hetero.jitter_probability = {} sets how often a jitter episode straggles, but "
                            "hetero.jitter = 0", h.jitter_probability),
                "set hetero.jitter > 0 (e.g. 2: stragglers 1 to 3 times slower), or drop hetero.jitter_probability");
  BATON_REQUIRE(h.policy.empty() || !h.cluster.empty(),
                fmt::format("hetero.policy = \"{}\" groups the devices of hetero.cluster, which is not set", h.policy),
                "set hetero.cluster to a cluster file (configs/clusters/), or drop hetero.policy");
  BATON_REQUIRE(!h.deterministic || h.sync == SyncMode::WSP,
                fmt::format("hetero.deterministic = true replays a seeded order of WSP's virtual workers "
                            "(wsp::interleave), but hetero.sync = \"{}\"", to_string(h.sync)),
                "set hetero.sync = \"wsp\", or drop hetero.deterministic");
  if (h.sync != SyncMode::WSP) {
    BATON_REQUIRE(h.staleness == 0 && h.cluster.empty(),
                  "hetero.sync = \"allreduce\" (the synchronous baseline: virtual workers average every wave, "
                  "staleness 0) takes hetero.virtual_workers and hetero.nm; the other [hetero] keys need "
                  "hetero.sync = \"wsp\"",
                  "set hetero.sync = \"wsp\" for a clock-distance bound (staleness); hetero.cluster does not "
                  "train yet: give the virtual workers in hetero.virtual_workers");
    if (!trains_virtual_workers(h)) {  // [hetero] at its defaults: the homogeneous layout
      BATON_REQUIRE(h.jitter == 0 && h.slowdown.empty() && h.memory_limit.empty(),
                    "hetero.slowdown, hetero.memory_limit and hetero.jitter emulate devices on the ranks of "
                    "virtual workers, but this run trains none (hetero.sync = \"allreduce\" without "
                    "hetero.virtual_workers or nm > 1 is the homogeneous layout)",
                    "name the virtual workers (e.g. hetero.virtual_workers = [\"0\", \"1\"]) or set hetero.sync = "
                    "\"wsp\"; or drop slowdown, memory_limit and jitter");
      return;
    }
  }
  // `baton train` replaces hetero.cluster by the virtual workers the planner derives from it
  // (app/hetero_cluster.h) before this check; other commands do not.
  BATON_REQUIRE(h.cluster.empty(),
                "hetero.cluster (virtual workers derived by the HetPipe partitioner) is resolved by `baton train` "
                "only",
                "run `baton train`, or give the virtual workers in hetero.virtual_workers (`baton plan --algorithm "
                "hetpipe` prints them)");
  const std::vector<VirtualWorker> vws = virtual_workers(h, 0);
  const bool pipelined =
      std::any_of(vws.begin(), vws.end(), [](const VirtualWorker& v) { return v.stages.size() > 1; });
  // ED-local places each tensor on a rank of a stage that owns it (train/hetero/wsp_stage.h); with
  // virtual workers of one rank each that rank holds the whole model, and the rule is the round robin.
  BATON_REQUIRE(h.placement == Placement::DEFAULT || (h.sync == SyncMode::WSP && pipelined),
                fmt::format("hetero.placement = \"local\" puts each stage's tensors on its own rank, which needs "
                            "virtual workers of several stages under hetero.sync = \"wsp\" (this run: sync = \"{}\", "
                            "{})", to_string(h.sync), pipelined ? "virtual workers of several stages" : "one rank per virtual worker"),
                "leave hetero.placement at \"default\" (tensors round robin over the shards), or give the virtual "
                "workers several stages (e.g. hetero.virtual_workers = [\"0, 1\", \"2, 3\"])");
  if (pipelined) {
    // Deterministic mode serializes the hooks of each VW's first stage, the only stage that talks
    // to the server with the default placement (train/hetero/wsp_turns.h).
    BATON_REQUIRE(!h.deterministic || h.placement == Placement::DEFAULT,
                  "hetero.deterministic = true orders the server accesses of each virtual worker's first stage; "
                  "with hetero.placement = \"local\" every stage is a client of its own",
                  "leave hetero.placement at \"default\" for a deterministic run, or drop hetero.deterministic");
    BATON_REQUIRE(h.sync == SyncMode::WSP,
                  "virtual workers of several stages under hetero.sync = \"allreduce\" are not built yet",
                  "use hetero.sync = \"wsp\" (staleness = 0 is the closest synchronous setting) or give each "
                  "virtual worker one rank");
    const int rows = cfg.train.global_batch / static_cast<int>(vws.size());
    BATON_REQUIRE(cfg.train.micro_batch == rows,
                  fmt::format("train.micro_batch = {}: a virtual worker of several stages runs each of its minibatches "
                              "(train.global_batch / {} VWs = {} rows) as one micro-batch through its pipeline "
                              "(HetPipe §4: the minibatch is the pipeline's unit)",
                              cfg.train.micro_batch, vws.size(), rows),
                  fmt::format("set train.micro_batch = {}", rows));
  }
  const ParallelConfig& p = cfg.parallel;
  BATON_REQUIRE(p.tp == 1 && p.pp == 1 && p.vp == 1 && p.replicas.empty() && p.stages.empty() && !p.zero1,
                fmt::format("hetero.sync = \"{}\" takes its pipelines from hetero.virtual_workers: parallel.tp, "
                            "pp, vp, replicas, stages and zero1 do not apply", to_string(h.sync)),
                "leave the [parallel] section at its defaults (tp = pp = vp = 1, no replicas or stages, "
                "zero1 = false); the virtual workers come from hetero.virtual_workers");
  BATON_REQUIRE(pipeline::schedule_traits(p.schedule).synchronous(),
                fmt::format("parallel.schedule = \"{}\" does not apply to virtual workers: they run one update "
                            "per minibatch (HetPipe §4's schedule inside a VW of several stages)", p.schedule),
                "leave parallel.schedule at its default (a flush schedule)");
  BATON_REQUIRE(cfg.train.steps % h.nm == 0,
                fmt::format("train.steps = {} is not a whole number of waves of hetero.nm = {} minibatches",
                            cfg.train.steps, h.nm),
                fmt::format("use train.steps = {} (every virtual worker runs train.steps minibatches, "
                            "pushing after each wave of nm)", (cfg.train.steps / h.nm + 1) * h.nm));
  const int64_t unit = int64_t{h.nm} * (h.staleness + 1);
  // Checkpoints of virtual workers (train/hetero/wsp_checkpoint.h) are taken at a wave's end; under WSP one
  // whose clock pulls (c >= D): a multiple of Nm minibatches, at least (D + 1)·Nm.
  BATON_REQUIRE(cfg.checkpoint.every == 0 || (cfg.checkpoint.every % h.nm == 0 && cfg.checkpoint.every >= unit),
                fmt::format("checkpoint.every = {}: virtual-worker checkpoints are taken at the end of a wave whose "
                            "clock pulls (clock >= staleness), so every must be a multiple of hetero.nm = {} and at least "
                            "(staleness + 1) x nm = {}", cfg.checkpoint.every, h.nm, unit),
                fmt::format("use checkpoint.every = {}", std::max<int64_t>(unit, (cfg.checkpoint.every + h.nm - 1) /
                                                                                     h.nm * h.nm)));
}

}  // namespace

void check_trainable(const Config& cfg) {
  check_hetero_trainable(cfg);
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
}

}  // namespace baton
