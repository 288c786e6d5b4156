// preflight_outputs; see preflight.h.
#include "train/loop/preflight.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/log.h"
#include "dist/agree.h"

namespace baton {
namespace {

namespace fs = std::filesystem;

// "" when `dir` can be created and written (a probe file is written and removed), else why not.
std::string writable(const std::string& key, const std::string& dir, int rank) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return fmt::format("{} = {} cannot be created: {}", key, dir, ec.message());
  const fs::path probe = fs::path(dir) / fmt::format(".baton-probe-{}-{}", rank, ::getpid());
  {
    std::ofstream f(probe);
    if (!(f << "baton\n") || !(f.flush())) {
      fs::remove(probe, ec);
      return fmt::format("{} = {} is not writable", key, dir);
    }
  }
  fs::remove(probe, ec);
  return {};
}

double mb(double bytes) { return bytes / 1e6; }

}  // namespace

void preflight_outputs(const Config& cfg, TrainSession& session) {
  const int rank = session.world().rank();
  std::string problem;
  if (rank == 0) problem = writable("run.dir", cfg.run.dir, rank);
  if (problem.empty()) problem = writable("checkpoint.dir", session.checkpoint_dir(), rank);
  if (problem.empty() && rank == 0) {
    std::error_code ec;
    const fs::space_info space = fs::space(session.checkpoint_dir(), ec);
    const double need = session.checkpoint_bytes_estimate();
    if (!ec && double(space.available) < 1.1 * need)
      problem = fmt::format("checkpoint.dir = {} has {:.1f} MB free, a checkpoint of this run needs about {:.1f} MB",
                            session.checkpoint_dir(), mb(double(space.available)), mb(need));
    else if (!ec && double(space.available) < (cfg.checkpoint.keep + 1) * need)
      log::warn("checkpoint.dir = {} has {:.1f} MB free: room for {} checkpoints of about {:.1f} MB, and up to {} "
                "(checkpoint.keep + 1) coexist while one is written",
                session.checkpoint_dir(), mb(double(space.available)), int(double(space.available) / need), mb(need),
                cfg.checkpoint.keep + 1);
  }
  dist::agree_on_problems(session.world(), problem,
                          "point run.dir / checkpoint.dir at a writable file system with room for the checkpoints "
                          "(checked before the first step)");
}

}  // namespace baton
