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
    f.flush();  // the bytes reach the file system here, where a full disk shows
    if (!f.good()) {
      f.close();
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      throw Error(fmt::format("failed writing {} (disk full?)", tmp), "free space in run.dir; the previous config.toml is intact");
    }
  }
  std::filesystem::rename(tmp, path);
  return path;
}

}  // namespace baton
