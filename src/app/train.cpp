// `baton train CONFIG [--set k=v]...`: starts MPI (one process, or every rank of an mpirun/srun
// job), loads and validates the config for the world size on every rank, checks that this build
// can train it and that its layout fits the model (training_preflight), and runs the trainer.
// Rank 0 logs; an error on any rank ends the whole job with that rank's message (never a hang).
// run_with_config is that frame, shared with `baton bench`.
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <optional>
#include <thread>

#include "app/app.h"
#include "app/hetero_cluster.h"
#include "backend/op_timed_backend.h"
#include "config/config.h"
#include "config/config_diff.h"
#include "core/build_info.h"
#include "core/error.h"
#include "core/log.h"
#include "dist/agree.h"
#include "dist/comm.h"
#include "dist/guard.h"
#include "dist/node_local.h"
#include "train/loop/session.h"
#include "config/virtual_workers.h"
#include "train/loop/lockstep_sync.h"
#include "train/loop/trainer.h"
#include "train/hetero/virtual_worker_sync.h"

namespace baton::app {
namespace {

// Several ranks on one node share its cores: unless OMP_NUM_THREADS says otherwise, each rank gets
// its share, so ranks do not oversubscribe the machine.
void share_cores_between_local_ranks() {
  if (std::getenv("OMP_NUM_THREADS") != nullptr) return;
  const dist::NodeLocal local = dist::node_local();
  if (local.local_size <= 1) return;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  omp_set_num_threads(std::max(1, cores / local.local_size));
}

// Every rank must run the same binary on the same config: a rank with another train.steps would
// hang the job at the end, one with another optim.lr train silently apart. Rank 0's resolved
// config and build identity go to every rank; the lowest rank that differs says where, once.
void require_same_config_everywhere(const Config& cfg, dist::Comm& world) {
  if (world.size() == 1) return;
  namespace b = baton::build;
  const std::string mine = fmt::format("[build]\nidentity = baton {} {} {} cuda {} mpi {}\n", b::version, b::build_type,
                                       b::compiler, b::cuda ? b::cuda_archs : "off", b::mpi_version) +
                           cfg.to_toml();
  const std::string rank0 = world.broadcast_string(mine, 0);
  const std::string diff = first_config_difference(mine, rank0, "rank 0");
  dist::agree_on_problems(world, diff.empty() ? "" : "runs another config or build than rank 0: " + diff,
                          "start every rank with the same baton binary, config file and --set arguments");
}

}  // namespace

// hetero.cluster (+ policy): the virtual workers and Nm the HetPipe planner derives for the cluster
// (app/hetero_cluster.h) replace them in the config, which is validated again and then runs (and
// is written to run.dir) as if they had been given.
static void resolve_hetero_cluster(Config& cfg, int world_size) {
  const std::vector<std::string> vws = derive_virtual_workers(cfg, world_size);
  const int nm = derive_nm(cfg, world_size);
  log::info("hetero.cluster {} (policy {}): {} virtual workers, Nm = {}: {}", cfg.hetero.cluster,
            cfg.hetero.policy.empty() ? "hd" : cfg.hetero.policy, vws.size(), nm, fmt::join(vws, " | "));
  cfg.hetero.virtual_workers = vws;
  cfg.hetero.nm = nm;
  cfg.hetero.cluster.clear();
  cfg.hetero.policy.clear();
  validate(cfg, world_size);
}

// A WSP run whose server clients push and pull on a thread of their own (dist/server_client.h)
// needs MPI_THREAD_MULTIPLE, which is chosen at MPI's initialisation, before the config is loaded
// for the world: decided from the parsed file (a config that does not load fails later anyway).
static bool wants_server_thread(const std::string& config, const std::vector<std::string>& overrides) {
  const std::optional<Config> cfg = peek_config(config, overrides);
  return cfg && cfg->hetero.sync == SyncMode::WSP && cfg->hetero.overlap && !cfg->hetero.deterministic;
}

int run_with_config(const std::string& config, const std::vector<std::string>& overrides,
                    bool log_all_ranks, const std::function<int(const Config&, dist::Comm&)>& body) {
  dist::MpiRuntime::init(nullptr, nullptr, wants_server_thread(config, overrides));
  const int rc = dist::run_guarded([&] {
    std::unique_ptr<dist::Comm> world = dist::MpiRuntime::world();
    log::set_rank(world->rank(), world->size(), world->rank() == 0 || log_all_ranks);
    share_cores_between_local_ranks();
    // A bad config fails the same way on every rank: agree on that and let rank 0 alone report
    // it (one error/hint pair instead of one per rank). A failure on some ranks only is reported
    // by each of them and ends the job (run_guarded).
    Config cfg;
    std::optional<Error> bad;
    try {
      cfg = load_config(config, overrides, world->size());
      if (!cfg.hetero.cluster.empty()) resolve_hetero_cluster(cfg, world->size());
      training_preflight(cfg, world->size());
    } catch (const Error& e) {
      bad = e;
    }
    const double failed = world->size() > 1 ? world->all_reduce_scalar(bad ? 1.0 : 0.0) : (bad ? 1 : 0);
    if (failed == world->size() && world->rank() != 0) return 1;
    if (bad) throw *bad;
    require_same_config_everywhere(cfg, *world);
    return body(cfg, *world);
  });
  dist::MpiRuntime::finalize();
  return rc;
}

int run_train(const TrainOptions& opts) {
  return run_with_config(opts.config, opts.overrides, opts.log_all_ranks,
                         [](const Config& cfg, dist::Comm& world) {
                           if (op_times_requested())
                             log::warn("BATON_OP_TIMES=1 is read by `baton bench` (the same session on "
                                       "synthetic data, timed steps only): baton train ignores it");
                           // The cross-group strategy of the layout: homogeneous ranks step in
                           // lockstep; virtual workers sync by the wave all-reduce or WSP.
                           const TrainSummary s =
                               train(cfg, world, trains_virtual_workers(cfg.hetero) ? make_virtual_worker_sync
                                                                                     : make_lockstep_sync);
                           return s.stopped_by_signal ? 130 : 0;
                         });
}

}  // namespace baton::app
