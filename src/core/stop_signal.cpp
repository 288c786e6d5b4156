#include "core/stop_signal.h"

#include <atomic>
#include <csignal>

namespace baton {
namespace {
std::atomic<int> g_signal{0};

extern "C" void on_stop_signal(int sig) {
  if (g_signal.load() != 0 && sig == SIGINT) {
    std::signal(SIGINT, SIG_DFL);
    std::raise(SIGINT);
    return;
  }
  g_signal.store(sig);
}
}  // namespace

void install_stop_handlers() {
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
}
bool stop_requested() { return g_signal.load() != 0; }
int stop_signal_number() { return g_signal.load(); }

}  // namespace baton
