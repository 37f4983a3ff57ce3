// The environment knobs: switches for tests, benches and debugging, or to run as an older kernel would, never
// needed in normal use. Every one lotus-bpf reads is a row here; docs/how-it-works.md ("Environment knobs") lists
// the same rows (a unit test checks), and nothing else reads a LOTUS_ variable (a CTest lint checks).
#pragma once
#include <string_view>

namespace lotus::common {

struct Knob {
    std::string_view name, effect;
};

inline constexpr Knob kKnobs[] = {
    {"LOTUS_BPF_DEBUG", "libbpf's own messages on stderr (load and verifier logs)"},
    {"LOTUS_DEBUG_EVENTS", "each record on stderr as it is read from the ring buffer"},
    {"LOTUS_POLL_MS", "=N: the loop sleeps N ms between reads instead of waking on records (tests: a wake-up lost "
                      "shows as a child held that long)"},
    {"LOTUS_PROBE_AT_ENTRY", "probes at a function's first instruction, not past its prologue's cheap-to-probe "
                             "instructions (the bench's comparison)"},
    {"LOTUS_NO_UPROBE_MULTI", "as a kernel before 6.6: one perf event per probe, no uprobe_multi links (per-process "
                              "probes are perf events opened on each process)"},
    {"LOTUS_NO_UPROBE_SESSION", "as a kernel before 6.13: an entry and a return probe where a session probe would do"},
    {"LOTUS_NO_HOLD_KFUNCS", "as a kernel before 6.13: no bpf_send_signal_task, so a forked child holds itself at "
                             "PyOS_AfterFork_Child"},
    {"LOTUS_NO_EXIT_GROUP_DEAD", "as a kernel before 6.16: sched_process_exit without its group_dead argument"},
    {"LOTUS_EVALUATOR_PROBE", "the evaluator's entry rather than the type-slot functions, as where the slot table is "
                              "not found"},
    {"LOTUS_SYSTEM_WIDE_PROBES", "system-wide Python probes and no holds, as kernels without per-process probes"},
    {"LOTUS_PER_CPU_SAMPLING", "one sampling event per CPU rather than per traced thread"},
    {"LOTUS_RAW_SYSCALLS", "every syscall's tracepoint (raw_syscalls) rather than libc's wrappers or the watched "
                           "syscalls' own events"},
    {"LOTUS_SYSCALL_EVENTS", "the watched syscalls' own tracepoints rather than libc's wrappers"},
    {"LOTUS_LIBC_READ", "pipes' reads at libc's read() rather than at the interpreter's os.read"},
    {"LOTUS_NO_PRIVATE_TRACEFS", "no private tracefs mount to read tracepoint ids where none is mounted"},
    {"LOTUS_TEST_HOLD_WHILE_STOPPED", "tests: a new child is held even while the tracer is stopped (to make a hold "
                                      "certain)"},
};

// The knob's value as set in the environment; nullptr when unset. Throws std::logic_error for a name not in
// kKnobs (a knob read without its row).
const char* knob_value(std::string_view name);
// A switch: set, not empty and not "0".
bool knob_on(std::string_view name);

} // namespace lotus::common
