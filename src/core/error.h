// Errors: every failure a user can cause becomes an Error carrying one line of what went wrong and
// one line of how to fix it. main() prints them as `error: ...` / `hint: ...` and exits non-zero.
// Library code never calls exit(); it throws.
#pragma once
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace baton {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what, std::string hint = {})
      : std::runtime_error(what), hint_(std::move(hint)) {}
  const std::string& hint() const { return hint_; }

 private:
  std::string hint_;
};

// An error every rank of the job raises at the same point, from values they all agree on after a
// collective (e.g. a diverged loss): reported once, by rank 0, instead of once per rank
// (dist/guard.h).
class AgreedError : public Error {
 public:
  using Error::Error;
};

// Internal invariant violated: a bug in baton, not in the user's input.
[[noreturn]] void internal_error(const char* file, int line, const std::string& msg);

}  // namespace baton

// User-facing precondition: BATON_REQUIRE(ok, "what {}", x) << ... ; hint given separately.
#define BATON_REQUIRE(cond, what, hint)                       \
  do {                                                        \
    if (!(cond)) throw ::baton::Error((what), (hint));        \
  } while (0)

// Internal invariant: names the source location because only a developer can act on it.
#define BATON_ASSERT(cond, ...)                                                         \
  do {                                                                                  \
    if (!(cond)) ::baton::internal_error(__FILE__, __LINE__, fmt::format(__VA_ARGS__)); \
  } while (0)
