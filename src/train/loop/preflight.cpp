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

// Every rank that writes a checkpoint file with others (MPI-IO: the job, or a VW) must see the
// directory its first rank writes in: the first rank puts a probe file with a token there, the
// others look for it where they resolve checkpoint.dir. A relative run.dir in different working
// directories per rank (or a run.dir on node-local disks) hung the first save without a message.
void same_checkpoint_dir(TrainSession& session) {
  dist::Comm& files = session.file_comm();
  std::string problem;
  if (files.size() > 1) {
    const fs::path dir = session.checkpoint_dir();
    int64_t token = files.rank() == 0 ? static_cast<int64_t>(::getpid()) * 1000003 + session.world().rank() : 0;
    files.broadcast(&token, 1, DType::I64, 0);
    const fs::path probe = dir / fmt::format(".baton-same-dir-{}", token);
    if (files.rank() == 0) std::ofstream(probe) << token << "\n";
    files.barrier();
    if (files.rank() != 0) {
      std::ifstream in(probe);
      int64_t seen = -1;
      if (!(in >> seen) || seen != token) {
        std::error_code ec;
        problem = fmt::format("does not see the checkpoint directory its file's first rank writes in (checkpoint.dir "
                              "{} is {} here)", session.checkpoint_dir(), fs::absolute(dir, ec).string());
      }
    }
    files.barrier();
    std::error_code ec;
    if (files.rank() == 0) fs::remove(probe, ec);
  }
  dist::agree_on_problems(session.world(), problem,
                          "every rank writes the same checkpoint file: give run.dir / checkpoint.dir as an absolute "
                          "path on a file system all nodes share (a relative one resolves against each rank's working "
                          "directory)");
}

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
  same_checkpoint_dir(session);
}

}  // namespace baton
