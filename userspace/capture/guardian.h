// The guardian: a small process of its own that bounds every hold (bpf/holds.bpf.h), whatever becomes of the
// tracer (killed, OOM-killed, crashed, stopped, stalled). It holds no BPF object but the lotus_held map. It
// continues each held child once the hold's deadline has passed, and every one at once when the tracer is gone,
// then goes on doing so until the hold program is unloaded. It runs in a session of its own, so that the job
// control of the tracer's terminal does not stop it with the tracer.
#pragma once
#include <sys/types.h>

#include <cstdint>

#include "lotus_abi.h"

namespace lotus::capture {

// What the guardian does with one entry of lotus_held.
enum class GuardianAction {
    Keep,     // not its business yet
    Continue, // SIGCONT the child, after claiming the entry (see guardian.cpp)
    Forget,   // delete the entry without a signal
};

struct GuardianView {
    uint64_t now_ns = 0;      // CLOCK_MONOTONIC, as bpf_ktime_get_ns
    uint64_t deadline_ns = 0; // how long a hold may last
    bool tracer_gone = false; // exited, or finishing (it asked the guardian to finish)
    bool child_gone = false;
    bool parent_stopped = false; // the job's own job control stopped it: its SIGCONT will continue the child
};

GuardianAction guardian_action(const lotus_hold& hold, const GuardianView& view);

// Whether a process is stopped (state T: a signal; t: a debugger), per /proc/PID/stat. False if it is gone.
bool process_stopped(pid_t pid);

// Whether a job-control stop is under way in a process, from its /proc/PID/status text: stopped already (T, t),
// or SIGSTOP pending, its own or its thread group's, not yet acted on. (Not SIGTSTP, SIGTTIN or SIGTTOU: a
// process may block those, and then they stay pending while it runs on.)
bool stop_under_way(const char* status);
bool stop_under_way(pid_t pid); // from /proc/PID/status; false if it is gone

// SIGCONTs a held child whose entry in the lotus_held map (fd) was just claimed (deleted). Its job's user may
// have stopped the job after the look at its parent and before this signal, which then undid the child's share of
// that stop: then the child is stopped again and its entry, back with LOTUS_HOLD_ATTACHED, has the guardian
// continue it once its parent runs again.
// True when the child was stopped again (its entry back in the map).
bool continue_held(int held_fd, uint32_t tgid, lotus_hold hold);

class Guardian {
public:
    // Starts `lotus-bpf __guardian` (this executable again) on the lotus_held map. Throws CaptureError.
    Guardian(int held_map_fd, uint32_t hold_prog_id, uint64_t deadline_ns);
    ~Guardian(); // asks it to finish (it still continues what is due) and reaps it, waiting a little
    Guardian(const Guardian&) = delete;
    Guardian& operator=(const Guardian&) = delete;
    pid_t pid() const { return pid_; }

private:
    pid_t pid_ = -1;
};

// The body of the hidden `__guardian` subcommand: argv[0] is "__guardian", then the tracer's pid, the hold
// program's id and the deadline in ns; the map is fd 3.
int guardian_main(int argc, char** argv);

} // namespace lotus::capture
