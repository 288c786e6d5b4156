// Chrome-trace JSON (the Trace Event Format's "traceEvents" array; load it in
// https://ui.perfetto.dev or chrome://tracing). ChromeTrace writes the events: processes and
// threads named by metadata events, work as complete ("ph": "X") events in microseconds.
// chrome_trace() draws a simulated Program with it: one process per rank (pid = rank), compute ops
// on thread 0, waits for receives and reductions on thread 1; one cost unit is shown as one
// millisecond. The measured timeline of a training run (train/observe/run_trace.h) uses the same writer.
#pragma once
#include <string>
#include <string_view>

#include "pipeline/instr.h"
#include "pipeline/simulate.h"

namespace baton::pipeline {

class ChromeTrace {
 public:
  // Names a process; processes are listed in `sort` order (Perfetto and chrome://tracing).
  void process(int pid, std::string_view name, int sort);
  void thread(int pid, int tid, std::string_view name);
  // A complete event; `args` is the inside of a JSON object ("\"step\":1,..."), or empty.
  void complete(int pid, int tid, std::string_view name, std::string_view cat, double ts_us, double dur_us,
                std::string_view args = {});
  // The finished JSON document.
  std::string str() const { return out_ + "\n]}\n"; }

 private:
  void event(const std::string& body);
  std::string out_ = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  bool first_ = true;
};

// A string as a JSON string literal (quotes, backslashes and control characters escaped).
std::string json_quote(std::string_view s);

// The events of simulated rank r of `lowered` on process pid0 + r (compute on thread 0, waits on
// thread 1; the caller names them); times are `sim`'s cost units × us_per_unit, shifted by ts0_us.
void add_simulated(ChromeTrace& trace, const Program& lowered, const SimResult& sim, int pid0,
                   double us_per_unit, double ts0_us);

std::string chrome_trace(const Program& lowered, const SimResult& sim);

}  // namespace baton::pipeline
