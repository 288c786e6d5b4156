// Writes the resolved config (every key, defaults included) next to the run's outputs, so a run
// can be reproduced from its directory alone.
#include <filesystem>
#include <fstream>

#include "config/config.h"
#include "core/error.h"

namespace baton {

std::string write_resolved_config(const Config& cfg, const std::string& dir) {
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/config.toml";
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    BATON_REQUIRE(f.good(), fmt::format("cannot write {}", tmp), "check that run.dir is writable");
    f << "# resolved config written by baton (defaults and --set overrides applied)\n"
      << cfg.to_toml();
    BATON_REQUIRE(f.good(), fmt::format("failed writing {}", tmp), "check free disk space");
  }
  std::filesystem::rename(tmp, path);
  return path;
}

}  // namespace baton
