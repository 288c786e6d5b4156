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
#include "config/config.h"
#include "core/error.h"
#include "core/log.h"
#include "dist/comm.h"
#include "dist/guard.h"
#include "dist/node_local.h"
#include "train/session.h"
#include "train/trainer.h"

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

}  // namespace

int run_with_config(const std::string& config, const std::vector<std::string>& overrides,
                    bool log_all_ranks, const std::function<int(const Config&, dist::Comm&)>& body) {
  dist::MpiRuntime::init(nullptr, nullptr);
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
      training_preflight(cfg, world->size());
    } catch (const Error& e) {
      bad = e;
    }
    const double failed = world->size() > 1 ? world->all_reduce_scalar(bad ? 1.0 : 0.0) : (bad ? 1 : 0);
    if (failed == world->size() && world->rank() != 0) return 1;
    if (bad) throw *bad;
    return body(cfg, *world);
  });
  dist::MpiRuntime::finalize();
  return rc;
}

int run_train(const TrainOptions& opts) {
  return run_with_config(opts.config, opts.overrides, opts.log_all_ranks,
                         [](const Config& cfg, dist::Comm& world) {
                           const TrainSummary s = train(cfg, &world);
                           return s.stopped_by_signal ? 130 : 0;
                         });
}

}  // namespace baton::app
