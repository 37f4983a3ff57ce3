// SIGINT, SIGTERM and SIGHUP: they stop every run of this process (session.h).
#include "session.h"

#include <signal.h>

#include <atomic>

namespace lotus::cli {

namespace {

// Global because a signal handler can reach nothing else: set by the handler, read by the loops (lock-free atomic).
std::atomic<int> g_stop_signal{0};

void on_signal(int sig) { g_stop_signal = sig; }

} // namespace

int stop_signal() { return g_stop_signal; }

void install_stop_handlers()
{
    struct sigaction sa = {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; // no SA_RESTART: the poll returns at once
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGHUP, &sa, nullptr);
}

} // namespace lotus::cli
