#include "train/observe/metrics.h"
#include "train/observe/tensorboard.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace baton {

MetricsWriter::MetricsWriter(const std::string& dir, bool append, const std::string& name) {
  if (dir.empty()) return;
  std::filesystem::create_directories(dir);
  path_ = dir + "/" + name;
  file_ = std::fopen(path_.c_str(), append ? "a" : "w");
  BATON_REQUIRE(file_ != nullptr, fmt::format("cannot open {} for writing", path_),
                "check that run.dir is writable");
}

void MetricsWriter::also_to(std::unique_ptr<TensorBoardWriter> tensorboard) { tensorboard_ = std::move(tensorboard); }

void MetricsWriter::rewind_to(int64_t step) {
  if (tensorboard_) tensorboard_->restart(step + 1);
  if (!file_) return;
  std::fclose(file_);
  file_ = nullptr;
  truncate_metrics_after(path_, step);
  file_ = std::fopen(path_.c_str(), "a");
  BATON_REQUIRE(file_ != nullptr, fmt::format("cannot open {} for writing", path_), "check that run.dir is writable");
}

MetricsWriter::~MetricsWriter() {
  if (file_) std::fclose(file_);
}

void MetricsWriter::write(const StepMetrics& m) {
  if (!file_) return;
  nlohmann::json j = {{"step", m.step},           {"loss", m.loss},
                      {"lr", m.lr},               {"grad_norm", m.grad_norm},
                      {"step_ms", m.step_ms},     {"tokens_per_s", m.tokens_per_s},
                      {"tflops_per_gpu", m.tflops_per_gpu}};
  j["mfu"] = m.mfu ? nlohmann::json(*m.mfu) : nlohmann::json(nullptr);
  if (m.comm_share) j["comm_share"] = *m.comm_share;
  if (m.val_loss) j["val_loss"] = *m.val_loss;
  if (m.images_per_s) j["images_per_s"] = *m.images_per_s;
  for (const auto& [name, value] : m.val_metrics) j["val_" + name] = value;
  if (m.rewinds > 0 || m.batches_skipped > 0) {
    j["rewinds"] = m.rewinds;
    j["batches_skipped"] = m.batches_skipped;
  }
  for (const auto& [key, change] : m.resumed_changes) j["resumed_changes"][key] = {change.first, change.second};
  if (m.vw) {
    j["vw"] = m.vw->vw;
    j["clock"] = m.vw->clock;
    j["c_global"] = m.vw->c_global;
    j["staleness"] = m.vw->staleness;
    j["wait_s"] = m.vw->wait_s;
    j["wait_total_s"] = m.vw->wait_total_s;
    j["push_s"] = m.vw->push_s;
    j["idle_s"] = m.vw->idle_s;
    j["idle_total_s"] = m.vw->idle_total_s;
    j["minibatches_per_s"] = m.vw->minibatches_per_s;
    j["slowdown"] = m.vw->slowdown;
    j["stretch_s"] = m.vw->stretch_s;
  }
  const std::string line = j.dump() + "\n";
  // A failed write (a full disk) is an error, not a record cut mid-line and a run that goes on.
  if (std::fputs(line.c_str(), file_) < 0 || std::fflush(file_) != 0)
    throw Error(fmt::format("cannot write {}: {}", path_, std::strerror(errno)),
                "free space in run.dir (or point run.dir elsewhere); checkpoint.resume = \"auto\" continues, and "
                "a torn last record is dropped on resume");
  if (tensorboard_) tensorboard_->write(m);
}

// A torn record (a write cut by a full disk or a crash: no newline at the end, not JSON) is dropped
// too, so that the next record starts its own line.
// A resumed run appends to its metrics file; lines of steps after the checkpoint (logged by the run
// that crashed before its next checkpoint) are dropped first, so each step appears once.
void truncate_metrics_after(const std::string& path, int64_t step) {
  std::ifstream in(path);
  if (!in) return;
  std::string kept, line;
  bool dropped = false;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || (j.contains("step") && j["step"].get<int64_t>() > step)) {
      dropped = true;
      continue;
    }
    kept += line + "\n";
  }
  if (!dropped) return;
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << kept;
    out.flush();
    if (!out.good()) {  // a full disk: keep the old file whole rather than rename a cut copy over it
      out.close();
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      throw Error(fmt::format("cannot rewrite {} (disk full?)", path), "free space in run.dir and resume again");
    }
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace baton
