// One tracing run: attach (to a PID or a launched command), poll until told to stop, then detach, write the
// trace and print the summary.
#pragma once
#include <string>

#include "options.h"

namespace lotus::cli {

// SIGINT, SIGTERM and SIGHUP stop every run of this process (and the agent): the signal, 0 while none came.
void install_stop_handlers();
int stop_signal();

// The node's name: --node, else the hostname.
std::string node_name(const Options& opts);

// Returns the process exit code. Errors are printed as one line on stderr.
int run_session(const Options& opts);

} // namespace lotus::cli
