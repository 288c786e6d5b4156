// The WSP runtime's trace file (see wsp_trace_file.h).
#include "train/hetero/wsp_trace_file.h"

#include "core/error.h"

namespace baton {

nlohmann::json to_json(const wsp::VersionVector& v) {
  nlohmann::json out = nlohmann::json::object();
  for (int k = 0; k < v.num_vw(); ++k) {
    nlohmann::json ranges = nlohmann::json::array();
    for (const auto& [first, last] : v.ranges(k)) ranges.push_back({first, last});
    if (!ranges.empty()) out[std::to_string(k)] = std::move(ranges);
  }
  return out;
}

WspTraceFile::WspTraceFile(const std::string& path, bool append)
    : path_(path), out_(path, append ? std::ios::app : std::ios::trunc) {
  BATON_REQUIRE(out_.good(), fmt::format("cannot open the WSP trace {}", path),
                "check that run.dir is writable, or set run.trace = false");
}

void WspTraceFile::write(const nlohmann::json& event) {
  out_ << event.dump() << '\n';
  out_.flush();  // a run that fails mid-way leaves its trace up to the failure
  BATON_REQUIRE(out_.good(), fmt::format("writing the WSP trace {} failed", path_),
                "check the free space of run.dir, or set run.trace = false");
}

}  // namespace baton
