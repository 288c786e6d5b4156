#include "train/checkpoint/checkpoint_fault.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace baton {
namespace {

// True when `spec` ("POINT" or "POINT@STEP") names this point (and step).
bool matches(const char* spec, const char* point, int64_t step) {
  if (!spec) return false;
  const std::string s = spec;
  const size_t at = s.find('@');
  if (s.substr(0, at) != point) return false;
  return at == std::string::npos || std::stoll(s.substr(at + 1)) == step;
}

}  // namespace

void fault_point(const char* point, int64_t step) {
  if (matches(std::getenv("BATON_CKPT_PAUSE_AT"), point, step)) {
    std::fprintf(stderr, "checkpoint: paused at %s (step %lld)\n", point, static_cast<long long>(step));
    std::fflush(stderr);
    const char* seconds = std::getenv("BATON_CKPT_PAUSE_S");
    sleep(seconds ? static_cast<unsigned>(std::stoul(seconds)) : 600u);
  }
  if (matches(std::getenv("BATON_CKPT_FAIL_AT"), point, step)) {
    std::fprintf(stderr, "checkpoint: injected failure at %s (step %lld)\n", point,
                 static_cast<long long>(step));
    std::fflush(stderr);
    _exit(86);
  }
}

}  // namespace baton
