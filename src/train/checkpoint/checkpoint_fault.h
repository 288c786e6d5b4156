// Test-only failure injection for checkpoint saves, so crash safety is tested with real processes:
//   BATON_CKPT_FAIL_AT=POINT[@STEP]   the process dies with _exit(86) at POINT (of the save of STEP)
//   BATON_CKPT_PAUSE_AT=POINT[@STEP]  it prints "checkpoint: paused at POINT (step N)" to stderr
//                                     and sleeps, so a test can kill -9 it at a known moment
//   BATON_CKPT_PAUSE_S=N              the pause lasts N seconds (default 600), after which the save
//                                     goes on: a test fills the disk meanwhile
// POINT is one of: after_create, mid_write, before_rename, before_latest, before_prune.
// _exit (not an exception) is deliberate: a crash runs no destructors and no cleanup. Unset, these
// cost one getenv per point.
#pragma once
#include <cstdint>

namespace baton {

void fault_point(const char* point, int64_t step);

}  // namespace baton
