// The WSP event trace's text form (see trace.h).
#include "wsp/trace.h"

#include <fmt/format.h>

namespace baton::wsp {

const char* to_string(EventKind k) {
  switch (k) {
    case EventKind::START: return "START";
    case EventKind::FINISH: return "FINISH";
    case EventKind::PUSH: return "PUSH";
    case EventKind::PULL_WAIT: return "PULL_WAIT";
    case EventKind::PULL: return "PULL";
    case EventKind::CLOCK: return "CLOCK";
    case EventKind::GLOBAL_CLOCK: return "GLOBAL_CLOCK";
  }
  return "?";
}

std::string to_string(const Event& e) {
  switch (e.kind) {
    case EventKind::START:
      return fmt::format("vw{} START {} c{} w={}", e.vw, e.minibatch, e.clock, e.weights.to_string());
    case EventKind::FINISH: return fmt::format("vw{} FINISH {}", e.vw, e.minibatch);
    case EventKind::PUSH: return fmt::format("vw{} PUSH wave {}", e.vw, e.wave);
    case EventKind::PULL_WAIT:
      return fmt::format("vw{} PULL_WAIT clock {} needs c_global {}", e.vw, e.wave, e.clock);
    case EventKind::PULL: return fmt::format("vw{} PULL clock {}", e.vw, e.wave);
    case EventKind::CLOCK: return fmt::format("vw{} CLOCK {}", e.vw, e.clock);
    case EventKind::GLOBAL_CLOCK: return fmt::format("GLOBAL_CLOCK {}", e.clock);
  }
  return "?";
}

std::string to_string(const Trace& t) {
  std::string out;
  for (const Event& e : t) out += to_string(e) + "\n";
  return out;
}

}  // namespace baton::wsp
