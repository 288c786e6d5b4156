// The WSP runtime's own trace (issue 23 item 3; docs/hetpipe.md "The runtime's trace"): with
// run.trace on a WSP run, every stage rank writes <run.dir>/wsp-trace-vw<v>-stage<s>.jsonl, one JSON
// object per event, as the events happen:
//   {"e":"run", "vw", "stage", "stages", "num_vw", "nm", "D", "first_step", "deterministic"}
//   {"e":"start", "mb", "reads", "c_local", "c_global", "staleness", "w"}  a forward begins
//   {"e":"update", "mb"}                                                  its update is applied
//   {"e":"push", "wave", "mb", "u"}                                       ũ of a wave leaves
//   {"e":"pull", "clock", "needs", "mb"}                                  the end of a clock asks
//   {"e":"merge", "x", "b", "mb", "gated", "meeting", "w"}                a pulled w_global merged
// "w" (and "u") are version vectors — which (VW, minibatch) updates the weights hold — as
// {"<vw>": [[first, last], ...]}. They are tags carried with the data, not recomputed from clocks:
// each weight version's tag is its predecessor's plus the update that made it; a pushed ũ's is the
// latest weights' less the wave start's; a merge gives versions ≥ b the pulled w_global's tag
// (every VW's minibatches of the c_global waves the server's word says it holds) plus the own
// pushed waves not in it plus what each version held beyond b (the rebase the tensors get).
// "start"'s "w" is the tag of the version the minibatch reads. In deterministic mode a leader's
// F and U hooks carry "turn", their place in the run's order (wsp_turns.h).
#pragma once
#include <cstdint>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "wsp/version_vector.h"

namespace baton {

nlohmann::json to_json(const wsp::VersionVector& v);

class WspTraceFile {
 public:
  // Appends when `append` (a resumed run), else starts the file anew. An Error if it cannot open.
  WspTraceFile(const std::string& path, bool append);
  void write(const nlohmann::json& event);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace baton
