// Chrome-trace writer (format: the Trace Event Format's "traceEvents" array of complete events).
// Hand-written JSON: the pipeline library depends only on core.
#include "pipeline/trace.h"

#include <fmt/format.h>

namespace baton::pipeline {

std::string json_quote(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<int>(c));
    } else {
      out += c;
    }
  }
  return out + "\"";
}

void ChromeTrace::event(const std::string& body) {
  out_ += first_ ? "" : ",\n";
  out_ += body;
  first_ = false;
}

void ChromeTrace::process(int pid, std::string_view name, int sort) {
  event(fmt::format(R"({{"name":"process_name","ph":"M","pid":{},"args":{{"name":{}}}}})", pid, json_quote(name)));
  event(fmt::format(R"({{"name":"process_sort_index","ph":"M","pid":{},"args":{{"sort_index":{}}}}})", pid, sort));
}

void ChromeTrace::thread(int pid, int tid, std::string_view name) {
  event(fmt::format(R"({{"name":"thread_name","ph":"M","pid":{},"tid":{},"args":{{"name":{}}}}})", pid, tid,
                    json_quote(name)));
  // Tracks in tid order, not by name.
  event(fmt::format(R"({{"name":"thread_sort_index","ph":"M","pid":{},"tid":{},"args":{{"sort_index":{}}}}})",
                    pid, tid, tid));
}

void ChromeTrace::complete(int pid, int tid, std::string_view name, std::string_view cat, double ts_us,
                           double dur_us, std::string_view args) {
  event(fmt::format(R"({{"name":{},"cat":{},"ph":"X","pid":{},"tid":{},"ts":{:.3f},"dur":{:.3f},"args":{{{}}}}})",
                    json_quote(name), json_quote(cat), pid, tid, ts_us, dur_us, args));
}

void add_simulated(ChromeTrace& trace, const Program& p, const SimResult& sim, int pid0, double us_per_unit,
                   double ts0_us) {
  for (size_t r = 0; r < p.ranks.size(); ++r) {
    const int pid = pid0 + static_cast<int>(r);
    for (size_t i = 0; i < p.ranks[r].size(); ++i) {
      const Instr& in = p.ranks[r][i];
      const double ts = sim.start[r][i], dur = sim.end[r][i] - sim.start[r][i];
      const bool compute = is_compute(in.op);
      if (!compute && dur <= 0) continue;  // sends and free ops take no time on the rank
      trace.complete(pid, compute ? 0 : 1,
                     fmt::format("{}{}", op_mnemonic(in.op), in.microbatch >= 0 ? std::to_string(in.microbatch) : ""),
                     op_name(in.op), ts0_us + ts * us_per_unit, dur * us_per_unit,
                     fmt::format(R"("stage":{},"microbatch":{},"slot":{},"weight_version":{})", in.stage,
                                 in.microbatch, in.slot, in.weight_version));
    }
  }
}

std::string chrome_trace(const Program& p, const SimResult& sim) {
  ChromeTrace trace;
  for (int r = 0; r < p.num_ranks(); ++r) {
    trace.process(r, fmt::format("rank {}", r), r);
    trace.thread(r, 0, "compute");
    trace.thread(r, 1, "wait");
  }
  add_simulated(trace, p, sim, 0, 1000.0, 0);  // one cost unit = 1 ms on the timeline
  return trace.str();
}

}  // namespace baton::pipeline
