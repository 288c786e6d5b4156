#include "core/error.h"

namespace baton {

void internal_error(const char* file, int line, const std::string& msg) {
  throw Error(fmt::format("internal error at {}:{}: {}", file, line, msg),
              "this is a bug in baton; please report it with the command line and config");
}

}  // namespace baton
