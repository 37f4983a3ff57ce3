// `lotus-bpf dump PID`: like py-spy dump, every thread's Python stack (and a blocked thread's native stack) of a
// process and its descendants (a job and its DataLoader workers), read from outside: no probe, no stop, no write.
#pragma once

namespace lotus::cli {

// Prints them; returns the exit status (1, with one line on stderr, when PID is no CPython process that can be
// read).
int run_dump(int pid, bool native);

} // namespace lotus::cli
