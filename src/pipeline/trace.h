// Chrome-trace JSON of a simulated Program (load it in Perfetto or chrome://tracing): one process
// per rank (pid = rank), compute ops on thread 0, waits for receives and reductions on thread 1,
// as complete ("ph": "X") events. One cost unit is shown as one millisecond.
#pragma once
#include <string>

#include "pipeline/instr.h"
#include "pipeline/simulate.h"

namespace baton::pipeline {

std::string chrome_trace(const Program& lowered, const SimResult& sim);

}  // namespace baton::pipeline
