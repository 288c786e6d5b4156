// Chrome-trace writer (format: the Trace Event Format's "traceEvents" array of complete events).
// Hand-written JSON: the pipeline library depends only on core.
#include "pipeline/trace.h"

#include <fmt/format.h>

namespace baton::pipeline {

std::string chrome_trace(const Program& p, const SimResult& sim) {
  constexpr double kUsPerUnit = 1000.0;  // one cost unit = 1 ms on the timeline
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  bool first = true;
  auto event = [&](const std::string& body) {
    out += first ? "" : ",\n";
    out += body;
    first = false;
  };
  for (size_t r = 0; r < p.ranks.size(); ++r) {
    event(fmt::format(R"({{"name":"process_name","ph":"M","pid":{},"args":{{"name":"rank {}"}}}})", r, r));
    event(fmt::format(R"({{"name":"thread_name","ph":"M","pid":{},"tid":0,"args":{{"name":"compute"}}}})", r));
    event(fmt::format(R"({{"name":"thread_name","ph":"M","pid":{},"tid":1,"args":{{"name":"wait"}}}})", r));
    for (size_t i = 0; i < p.ranks[r].size(); ++i) {
      const Instr& in = p.ranks[r][i];
      const double ts = sim.start[r][i], dur = sim.end[r][i] - sim.start[r][i];
      const bool compute = is_compute(in.op);
      if (!compute && dur <= 0) continue;  // sends and free ops take no time on the rank
      std::string name = fmt::format("{}{}", op_mnemonic(in.op), in.microbatch >= 0 ? std::to_string(in.microbatch) : "");
      event(fmt::format(
          R"({{"name":"{}","cat":"{}","ph":"X","pid":{},"tid":{},"ts":{:.3f},"dur":{:.3f},"args":{{"stage":{},"microbatch":{},"slot":{},"weight_version":{}}}}})",
          name, op_name(in.op), r, compute ? 0 : 1, ts * kUsPerUnit, dur * kUsPerUnit, in.stage,
          in.microbatch, in.slot, in.weight_version));
    }
  }
  out += "\n]}\n";
  return out;
}

}  // namespace baton::pipeline
