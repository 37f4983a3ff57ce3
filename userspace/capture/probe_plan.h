// What a run loads and attaches, decided in two steps: the kernel's features, detected once (detect_kernel), and
// a pure plan of the programs from them, the run's wishes and the interpreter (plan_probes), which the unit tests
// check without root or BPF. Probe applies the plan to the skeleton.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace lotus::capture {

// What this kernel offers lotus-bpf, from its BTF (the environment knobs LOTUS_NO_UPROBE_MULTI,
// LOTUS_NO_UPROBE_SESSION, LOTUS_NO_HOLD_KFUNCS and LOTUS_NO_EXIT_GROUP_DEAD make it read as an older kernel).
struct KernelFeatures {
    int uprobe_multi_type = -1;   // BPF_TRACE_UPROBE_MULTI (Linux 6.6+): per-process probe links; -1 none
    int uprobe_session_type = -1; // BPF_TRACE_UPROBE_SESSION with bpf_session_is_return (6.13+); -1 none
    bool hold_kfuncs = false;     // bpf_send_signal_task, bpf_task_from_pid, bpf_task_release: new children held
    bool sock_tracepoints = false; // sock_send_length / sock_recv_length (6.3+): network bytes
    bool exit_group_dead = true;  // sched_process_exit has its group_dead argument (6.16+); else on_exit_counted
    // uprobe_multi's pid filter passes every thread of the process: Linux 6.10 fixed it to compare memory, not the
    // task (6.6-6.9 ran a process's probes for its main thread only). Read from the release: a backport is not
    // seen, and per-process probes are then perf events, which were always right.
    bool multi_pid_all_threads = true;
    std::string release;          // uname's release, for what is said about the kernel
    // The kfuncs the BPF object declares (__ksym __weak) that the kernel's own BTF lacks (knobs aside): libbpf
    // then looks for them in the modules' BTF, which before libbpf 1.2 fails without CAP_SYS_ADMIN.
    std::vector<std::string> kfuncs_absent;
    // What lotus-bpf cannot run without and this kernel lacks (BTF, task storage...), each with the Linux version
    // that brought it; empty where it runs.
    std::vector<std::string> missing;
};
KernelFeatures detect_kernel();
// This kernel's, detected at the first call (the BTF is read once a run).
const KernelFeatures& this_kernel();
// The one line that refuses a kernel lacking what lotus-bpf needs, or "" where it has it all.
std::string kernel_refusal(const KernelFeatures& k);
// The one line that refuses a run without CAP_SYS_ADMIN on a kernel whose uprobes lotus-bpf must open as perf
// events (no uprobe_multi links, or before 6.10 their pid filter: capture/uprobe_links.h), or "" where it may run:
// the uprobe PMU needs CAP_SYS_ADMIN (since the 2025 fix "perf: Fix privilege check for perf_uprobe", in the
// stable kernels too; CAP_PERFMON before it, which a release does not tell), and tracefs's uprobe_events root.
// Likewise where the kernel lacks a kfunc the object declares and libbpf (before 1.2: libbpf_skips_modules false)
// fails on the modules' BTF it may not list.
std::string capability_refusal(const KernelFeatures& k, bool sys_admin, bool libbpf_skips_modules);

// What the run asks for and what the interpreter has.
struct PlanInputs {
    bool evaluator = false;      // --span, --all-calls: the evaluator's entry rather than the type-slot functions
    bool inline_calls = false;   // --all-calls where calls are inlined (3.11)
    bool native = false, sampling = false, network = false;
    bool interp_slots = false;   // the interpreter's slot table was found
    bool interp_os_read = false; // its os.read was found
    bool interp_after_fork = false; // its PyOS_AfterFork_Child was found (where a forked child holds itself)
    bool links_libc = false;     // the interpreter's object links a libc
    bool libc_dlopen = false;    // that libc's wrappers include dlopen (asked only with native)
    // the environment knobs (common/knobs.h)
    bool knob_evaluator = false, knob_system_wide = false, knob_per_cpu_sampling = false, knob_raw_syscalls = false,
         knob_syscall_events = false, knob_libc_read = false;
};

// Which programs load (autoload), and the choices they follow from.
struct ProbePlan {
    bool session = false;         // uprobe sessions: one program sees entry and return
    bool slots = false;           // the type-slot functions are probed, not the evaluator
    bool hold = false;            // per-process Python probes, new children held until theirs are in
    bool hold_self = false;       // ...a child holding itself (no hold kfuncs: before 6.13), not stopped at fork
    bool perf_links = false;      // ...through perf-event uprobes opened on each process (no uprobe_multi: < 6.6)
    bool net = false;             // network bytes counted
    bool thread_sampling = false; // sampling events on the traced threads rather than per CPU
    bool libc = false;            // libc's wrappers in the traced processes rather than syscall tracepoints
    bool os_read = false;         // pickles read at the interpreter's os.read rather than at libc's read()
    bool try_syscall_events = false; // the watched syscalls' own tracepoints (where their ids can be read)
    struct {
        bool py_call = false, py_entry = false, py_slot = false, py_slot_entry = false, py_return = false;
        bool py_resume = false, py_retval = false;
        bool native_call = false;
        bool on_sample = false, unsampled_threads = false;
        bool on_fork_hold = false, on_exec_hold = false;
        bool on_fork_note = false, on_child_start = false, on_exec_stop = false, find_keepers = false;
        bool on_sock_send = false, on_sock_recv = false;
        bool libc_call = false;
    } load;
};
ProbePlan plan_probes(const KernelFeatures& k, const PlanInputs& in);

// What this kernel cannot give the run that the plan was made for, one sentence each (the feature, the Linux
// version that brought it, and what the run does without it): said once in the run's header, summary and
// otherData. Empty on a kernel that has it all.
std::vector<std::string> kernel_lacks(const KernelFeatures& k, const ProbePlan& p, const PlanInputs& in);
// The kernel's features, one "name: yes|no (what it is for)" line each, for `lotus-bpf probes`.
std::vector<std::string> describe_kernel(const KernelFeatures& k);

} // namespace lotus::capture
