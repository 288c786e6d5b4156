// placeholder, replaced below
#include "app/app.h"
#include "core/error.h"
namespace baton::app {
int run_profile(const ProfileOptions&) { throw Error("baton profile is not built yet", "see issue 7"); }
}  // namespace baton::app
