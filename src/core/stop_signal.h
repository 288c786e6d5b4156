// Graceful stop: SIGINT (Ctrl-C) and SIGTERM (what a scheduler sends before preemption) set a flag
// that the trainer reads between steps, so it finishes the current step and exits cleanly.
// A second SIGINT restores the default handler's behaviour (immediate exit).
#pragma once

namespace baton {

void install_stop_handlers();
bool stop_requested();
int stop_signal_number();  // the signal that asked to stop, 0 if none

}  // namespace baton
