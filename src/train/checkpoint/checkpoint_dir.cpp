#include "train/checkpoint/checkpoint_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>

#include "core/log.h"
#include "core/timer.h"
#include "train/checkpoint/checkpoint_comm.h"
#include "train/checkpoint/checkpoint_fault.h"

namespace baton {
namespace fs = std::filesystem;
namespace {

constexpr const char* kLatest = "latest";
constexpr const char* kPinned = "pinned";  // names checkpoint.keep's rotation never removes, a line each

std::vector<std::string> pinned_names(const std::string& dir) {
  std::ifstream f(dir + "/" + kPinned);
  std::vector<std::string> names;
  for (std::string line; std::getline(f, line);)
    if (!line.empty()) names.push_back(line);
  return names;
}

// step-<digits>.h5 -> step; -1 for any other name (including .tmp files).
int64_t step_of(const std::string& filename) {
  static const std::regex pattern(R"(step-(\d+)\.h5)");
  std::smatch m;
  return std::regex_match(filename, m, pattern) ? std::stoll(m[1].str()) : -1;
}

void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), O_RDONLY | (directory ? O_DIRECTORY : 0));
  const bool ok = fd >= 0 && ::fsync(fd) == 0;
  const int err = errno;
  if (fd >= 0) ::close(fd);
  BATON_REQUIRE(ok, fmt::format("cannot fsync '{}': {}", path, std::strerror(err)),
                "check the file system of checkpoint.dir");
}

void rename_durably(const std::string& from, const std::string& to, const std::string& dir) {
  std::error_code ec;
  fs::rename(from, to, ec);
  BATON_REQUIRE(!ec, fmt::format("cannot rename '{}' to '{}': {}", from, to, ec.message()),
                "check the permissions of checkpoint.dir");
  fsync_path(dir, true);
}

void write_latest(const std::string& dir, const std::string& filename) { write_durably(dir, kLatest, filename + "\n"); }

// Removes leftovers of interrupted saves and all but the newest `keep` complete checkpoints, never
// `just_written`.
void prune(const std::string& dir, int keep, const std::string& just_written) {
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.ends_with(".h5.tmp") && name.starts_with("step-")) fs::remove(e.path());
  }
  std::vector<CheckpointEntry> all = list_checkpoints(dir);
  const std::vector<std::string> pinned = pinned_names(dir);
  std::erase_if(all, [&](const CheckpointEntry& e) {
    return std::find(pinned.begin(), pinned.end(), fs::path(e.path).filename().string()) != pinned.end();
  });
  const int excess = static_cast<int>(all.size()) - std::max(keep, 1);
  for (int i = 0; i < excess; ++i) {
    if (all[i].path == just_written) continue;
    std::error_code ec;
    fs::remove(all[i].path, ec);
    if (ec) log::warn("cannot remove old checkpoint '{}': {}", all[i].path, ec.message());
  }
}

}  // namespace

void write_durably(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string tmp = dir + "/" + name + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  bool ok = fd >= 0 && ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  const int err = errno;
  if (fd >= 0 && ::close(fd) != 0) ok = false;
  if (!ok) {
    std::error_code ec;
    fs::remove(tmp, ec);  // a torn small file is never left beside the good one
    throw Error(fmt::format("cannot write '{}': {}", tmp, std::strerror(err)),
                "check free disk space in checkpoint.dir");
  }
  rename_durably(tmp, dir + "/" + name, dir);
}

std::string checkpoint_file_name(int64_t step) { return fmt::format("step-{:07d}.h5", step); }

std::vector<CheckpointEntry> list_checkpoints(const std::string& dir) {
  std::vector<CheckpointEntry> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const int64_t step = step_of(e.path().filename().string());
    if (step >= 0 && e.is_regular_file()) out.push_back({step, e.path().string()});
  }
  std::sort(out.begin(), out.end(),
            [](const CheckpointEntry& a, const CheckpointEntry& b) { return a.step < b.step; });
  return out;
}

std::string vw_checkpoint_dir(const std::string& checkpoint_dir, int vw) {
  return fmt::format("{}/vw{}", checkpoint_dir, vw);
}

std::optional<std::string> read_latest(const std::string& dir) {
  std::ifstream f(dir + "/" + kLatest);
  std::string name;
  if (!f || !std::getline(f, name) || name.empty()) return std::nullopt;
  const std::string path = dir + "/" + name;
  if (!fs::is_regular_file(path)) return std::nullopt;
  return path;
}

std::vector<std::string> checkpoint_candidates(const std::string& dir) {
  std::vector<std::string> out;
  if (auto latest = read_latest(dir); latest && step_of(fs::path(*latest).filename().string()) < 0)
    out.push_back(*latest);
  const std::vector<CheckpointEntry> all = list_checkpoints(dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it) out.push_back(it->path);
  return out;
}

std::string resolve_checkpoint(const std::string& path_or_dir) {
  if (!fs::is_directory(path_or_dir)) return path_or_dir;
  const std::vector<std::string> c = checkpoint_candidates(path_or_dir);
  BATON_REQUIRE(!c.empty(), fmt::format("no checkpoint in '{}' (no step-NNNNNNN.h5 files)", path_or_dir),
                "train first (`baton train CONFIG` saves into <run.dir>/ckpt) or point at a .h5 file");
  return c.front();
}

SaveResult save_checkpoint(const std::string& dir, const CheckpointMeta& meta,
                           std::span<const TensorShard> shards, int keep, MPI_Comm comm) {
  Timer timer;
  const bool root = checkpoint_comm_rank(comm) == 0;
  SaveResult r;
  r.path = dir + "/" + checkpoint_file_name(meta.step);
  const std::string tmp = r.path + ".tmp";
  if (root) fs::create_directories(dir);
  checkpoint_barrier(comm);
  try {
    write_checkpoint_file(tmp, meta, shards, comm);
    r.write_seconds = timer.seconds();
    // Rank 0 alone makes the file durable and names it; the others learn how that went before the
    // next collective (an error on rank 0 alone left them waiting in a barrier).
    std::string problem;
    if (root) {
      try {
        fsync_path(tmp, false);
        fault_point("before_rename", meta.step);
        rename_durably(tmp, r.path, dir);
      } catch (const std::exception& e) {
        problem = e.what();
      }
    }
    checkpoint_agree(comm, problem, "check the file system of checkpoint.dir; the previous checkpoints are intact");
    r.sync_seconds = timer.seconds() - r.write_seconds;
  } catch (...) {
    std::error_code ec;
    if (root) fs::remove(tmp, ec);
    throw;
  }
  std::string problem;
  if (root) {
    try {
      fault_point("before_latest", meta.step);
      write_latest(dir, checkpoint_file_name(meta.step));
      fault_point("before_prune", meta.step);
      prune(dir, keep, r.path);
    } catch (const std::exception& e) {
      problem = e.what();
    }
  }
  checkpoint_agree(comm, problem, fmt::format("free space in checkpoint.dir (or mend its file system); the checkpoint "
                                              "{} is complete and checkpoint.resume = \"auto\" continues from it",
                                              r.path));
  r.bytes = fs::file_size(r.path);
  r.seconds = timer.seconds();
  return r;
}

std::string set_aside_after_spike(const std::string& dir, int64_t spike_step) {
  std::string good;
  for (const CheckpointEntry& e : list_checkpoints(dir)) {
    if (e.step < spike_step - 1) {
      good = e.path;
      continue;
    }
    std::error_code ec;
    fs::rename(e.path, e.path + ".spike", ec);
    BATON_REQUIRE(!ec, fmt::format("cannot rename '{}' after the spike: {}", e.path, ec.message()),
                  "check the permissions of checkpoint.dir");
    log::warn("set aside {} (saved at or after the step that produced the spike)", e.path + ".spike");
  }
  if (good.empty()) {
    std::error_code ec;
    fs::remove(dir + "/" + kLatest, ec);  // it named a checkpoint set aside
    return good;
  }
  const std::string name = fs::path(good).filename().string();
  write_latest(dir, name);
  std::vector<std::string> pinned = pinned_names(dir);
  if (std::find(pinned.begin(), pinned.end(), name) == pinned.end()) {
    pinned.push_back(name);
    std::string text;
    for (const std::string& n : pinned) text += n + "\n";
    write_durably(dir, kPinned, text);
  }
  return good;
}

}  // namespace baton
