// run_guarded: the outermost frame of every rank. An exception that escapes `body` is printed as
// `error: [rank r] ...` / `hint: ...` (no rank prefix in a one-rank job), and then:
// - in a multi-rank job, MpiRuntime::abort(1) ends every rank at once: the other ranks are
//   probably blocked in a collective this rank will never join, so returning would hang the job;
// - in a one-rank job (or without MPI), it returns 1 so main can clean up and exit normally.
// An AgreedError (core/error.h: every rank raises the same one) is printed once, by rank 0.
// Otherwise returns body's result.
#pragma once
#include <functional>
#include <string>

namespace baton::dist {

int run_guarded(const std::function<int()>& body);

// The error report run_guarded prints (exposed for callers that catch errors themselves).
// Returns 1; aborts the job instead when it has more than one rank.
int fail_job(const std::string& what, const std::string& hint);

}  // namespace baton::dist
