// `baton train CONFIG [--set k=v]...`: loads and validates the config, then runs the trainer.
#include <cstdlib>

#include "app/app.h"
#include "config/config.h"
#include "core/error.h"
#include "train/trainer.h"

namespace baton::app {
namespace {

// Ranks this process was started among, from the launcher's environment (mpirun or srun).
int launcher_world_size() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS"}) {
    if (const char* v = std::getenv(var)) return std::max(1, std::atoi(v));
  }
  return 1;
}

}  // namespace

int run_train(const TrainOptions& opts) {
  const int world = launcher_world_size();
  BATON_REQUIRE(world == 1,
                fmt::format("started as {} ranks, but multi-rank training is not implemented yet", world),
                "run one process (`baton train CONFIG`); tp/dp/pp layouts arrive with the distributed issue");
  Config cfg = load_config(opts.config, opts.overrides, world);
  TrainSummary s = train(cfg);
  return s.stopped_by_signal ? 130 : 0;
}

}  // namespace baton::app
