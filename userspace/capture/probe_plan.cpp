#include "probe_plan.h"

#include <bpf/btf.h>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <sys/utsname.h>
#include <utility>

#include "common/knobs.h"

namespace lotus::capture {

namespace {

bool kernel_has(const btf* vmlinux, std::initializer_list<const char*> names, int kind)
{
    if (!vmlinux)
        return false;
    bool has = true;
    for (const char* name : names)
        has = has && btf__find_by_name_kind(vmlinux, name, static_cast<__u32>(kind)) > 0;
    return has;
}

// The number this kernel gives attach type `name` (enum bpf_attach_type in its BTF), or -1 when it has none
// (or the knob `off` is set, to run as such a kernel does). libbpf 1.1 predates both BPF_TRACE_UPROBE_MULTI
// (Linux 6.6) and BPF_TRACE_UPROBE_SESSION (6.13); a session also needs the bpf_session_is_return kfunc.
int kernel_attach_type(const btf* vmlinux, const char* name, const char* off, const char* kfunc = nullptr)
{
    if (common::knob_on(off) || !vmlinux)
        return -1;
    int id = btf__find_by_name_kind(vmlinux, "bpf_attach_type", BTF_KIND_ENUM);
    if (id <= 0 || (kfunc && btf__find_by_name_kind(vmlinux, kfunc, BTF_KIND_FUNC) <= 0))
        return -1;
    const btf_type* t = btf__type_by_id(vmlinux, id);
    const struct btf_enum* e = btf_enum(t);
    for (unsigned i = 0; i < btf_vlen(t); i++)
        if (strcmp(btf__name_by_offset(vmlinux, e[i].name_off), name) == 0)
            return static_cast<int>(e[i].val);
    return -1;
}

// Whether enum `type` of this kernel's BTF has a value named `value` (a map type, a helper's id).
bool enum_has(const btf* vmlinux, const char* type, const char* value)
{
    int id = vmlinux ? btf__find_by_name_kind(vmlinux, type, BTF_KIND_ENUM) : -1;
    if (id <= 0)
        return false;
    const btf_type* t = btf__type_by_id(vmlinux, id);
    const struct btf_enum* e = btf_enum(t);
    for (unsigned i = 0; i < btf_vlen(t); i++)
        if (strcmp(btf__name_by_offset(vmlinux, e[i].name_off), value) == 0)
            return true;
    return false;
}

// The number of arguments a BTF-typed tracepoint passes its programs (its btf_trace_* typedef: a pointer to a
// prototype whose first parameter is the tracepoint's own data), or -1 where it has none.
int tracepoint_args(const btf* vmlinux, const char* name)
{
    int id = vmlinux ? btf__find_by_name_kind(vmlinux, (std::string("btf_trace_") + name).c_str(), BTF_KIND_TYPEDEF)
                     : -1;
    if (id <= 0)
        return -1;
    const btf_type* t = btf__type_by_id(vmlinux, btf__resolve_type(vmlinux, static_cast<__u32>(id)));
    if (!t || !btf_is_ptr(t))
        return -1;
    t = btf__type_by_id(vmlinux, t->type);
    return t && btf_is_func_proto(t) ? static_cast<int>(btf_vlen(t)) - 1 : -1;
}

// What the programs use that every kernel they load on must have: BTF-typed tracepoints' BTF, task storage and
// the current task as BTF (5.11), the attach cookie and a task's registers (5.15).
void check_needs(const btf* vmlinux, KernelFeatures& k)
{
    if (!vmlinux) {
        k.missing.push_back("BTF (/sys/kernel/btf/vmlinux, CONFIG_DEBUG_INFO_BTF)");
        return;
    }
    const std::pair<const char*, const char*> needs[] = {
        {"BPF_MAP_TYPE_RINGBUF", "the BPF ring buffer (5.8)"},
        {"BPF_MAP_TYPE_TASK_STORAGE", "BPF task storage (5.11)"},
        {"BPF_FUNC_get_current_task_btf", "bpf_get_current_task_btf (5.11)"},
        {"BPF_FUNC_get_attach_cookie", "bpf_get_attach_cookie (5.15)"},
        {"BPF_FUNC_task_pt_regs", "bpf_task_pt_regs (5.15)"},
    };
    for (const auto& [value, what] : needs)
        if (!enum_has(vmlinux, strncmp(value, "BPF_MAP", 7) == 0 ? "bpf_map_type" : "bpf_func_id", value))
            k.missing.push_back(what);
}

} // namespace

std::string kernel_refusal(const KernelFeatures& k)
{
    if (k.missing.empty())
        return "";
    std::string what;
    for (const auto& m : k.missing)
        what += (what.empty() ? "" : ", ") + m;
    return "Linux 5.15 or later is needed: this kernel (" + (k.release.empty() ? "?" : k.release) + ") has no " +
           what;
}

std::string capability_refusal(const KernelFeatures& k, bool sys_admin, bool libbpf_skips_modules)
{
    const std::string kernel = "this kernel (" + (k.release.empty() ? "?" : k.release) + ") has ";
    if (sys_admin)
        return "";
    if (k.uprobe_multi_type < 0 || !k.multi_pid_all_threads)
        return kernel +
               (k.uprobe_multi_type < 0 ? "no uprobe_multi links (Linux 6.6+)"
                                        : "no uprobe_multi pid filter for every thread (Linux 6.10+)") +
               ": lotus-bpf's uprobes are then perf events, which need CAP_SYS_ADMIN (besides CAP_BPF and CAP_PERFMON)";
    if (!k.kfuncs_absent.empty() && !libbpf_skips_modules)
        return kernel + "no " + k.kfuncs_absent.front() +
               ": libbpf (before 1.2) then looks for it in the kernel modules' BTF, which needs CAP_SYS_ADMIN (besides "
               "CAP_BPF and CAP_PERFMON)";
    return "";
}

KernelFeatures detect_kernel()
{
    // The kernel's BTF, read once (~5 MB).
    std::unique_ptr<btf, decltype(&btf__free)> vmlinux(btf__load_vmlinux_btf(), btf__free);
    KernelFeatures k;
    k.uprobe_multi_type = kernel_attach_type(vmlinux.get(), "BPF_TRACE_UPROBE_MULTI", "LOTUS_NO_UPROBE_MULTI");
    k.uprobe_session_type = k.uprobe_multi_type < 0 ? -1
                                                    : kernel_attach_type(vmlinux.get(), "BPF_TRACE_UPROBE_SESSION",
                                                                         "LOTUS_NO_UPROBE_SESSION",
                                                                         "bpf_session_is_return");
    k.hold_kfuncs = !common::knob_on("LOTUS_NO_HOLD_KFUNCS") &&
                    kernel_has(vmlinux.get(), {"bpf_send_signal_task", "bpf_task_from_pid", "bpf_task_release"},
                               BTF_KIND_FUNC);
    k.sock_tracepoints =
        kernel_has(vmlinux.get(), {"btf_trace_sock_send_length", "btf_trace_sock_recv_length"}, BTF_KIND_TYPEDEF);
    k.exit_group_dead =
        !common::knob_on("LOTUS_NO_EXIT_GROUP_DEAD") && tracepoint_args(vmlinux.get(), "sched_process_exit") >= 2;
    for (const char* f : {"bpf_send_signal_task", "bpf_task_from_pid", "bpf_task_release", "bpf_session_is_return",
                          "bpf_session_cookie"}) // (bpf/holds.bpf.h, bpf/lotus.bpf.c)
        if (!kernel_has(vmlinux.get(), {f}, BTF_KIND_FUNC))
            k.kfuncs_absent.push_back(f);
    utsname u{};
    if (uname(&u) == 0)
        k.release = u.release;
    int major = 0, minor = 0;
    k.multi_pid_all_threads = sscanf(k.release.c_str(), "%d.%d", &major, &minor) == 2 &&
                              (major > 6 || (major == 6 && minor >= 10));
    check_needs(vmlinux.get(), k);
    return k;
}

const KernelFeatures& this_kernel()
{
    static const KernelFeatures k = detect_kernel();
    return k;
}

ProbePlan plan_probes(const KernelFeatures& k, const PlanInputs& in)
{
    ProbePlan p;
    p.session = k.uprobe_session_type >= 0;
    // The evaluator as interpreters whose slot table is not found are probed (LOTUS_EVALUATOR_PROBE: likewise).
    p.slots = in.interp_slots && !in.evaluator && !in.knob_evaluator;
    // Per-process Python probes hold a new child until its own are attached: stopped at its fork by the hold
    // kfuncs (6.13+), else stopping itself at its first step in CPython after the fork (any kernel lotus-bpf
    // runs on, where the interpreter has PyOS_AfterFork_Child). Their links: uprobe_multi links with a pid
    // (6.6+), else a perf-event uprobe per function opened on the process. LOTUS_SYSTEM_WIDE_PROBES: neither.
    const bool kfunc_hold = k.uprobe_multi_type >= 0 && k.hold_kfuncs;
    p.hold = (kfunc_hold || in.interp_after_fork) && !in.knob_system_wide;
    p.hold_self = p.hold && !kfunc_hold;
    p.perf_links = p.hold && (k.uprobe_multi_type < 0 || !k.multi_pid_all_threads);
    p.net = in.network && k.sock_tracepoints;
    p.thread_sampling = in.sampling && p.hold && !in.knob_per_cpu_sampling;
    // The watched syscalls: libc's wrappers in the traced processes where probes are per process and sessions
    // exist (the native map also needs libc's dlopen); else their own events; else every syscall's.
    p.libc = p.hold && p.session && !in.knob_raw_syscalls && !in.knob_syscall_events && in.links_libc &&
             (!in.native || in.libc_dlopen);
    p.os_read = p.libc && p.slots && in.interp_os_read && !in.knob_libc_read;
    p.try_syscall_events = !p.libc && !in.knob_raw_syscalls;
    auto& l = p.load;
    l.py_call = p.session && !p.slots;
    l.py_entry = !p.session && !p.slots;
    l.py_slot = p.session && p.slots;
    l.py_slot_entry = !p.session && p.slots;
    l.py_return = !p.session;
    l.py_resume = l.py_retval = in.inline_calls;
    l.native_call = in.native; // plain uprobes on entries and return instructions, whatever the kernel
    l.on_sample = in.sampling;
    l.unsampled_threads = p.thread_sampling;
    l.on_fork_hold = l.on_exec_hold = p.hold && !p.hold_self;
    l.on_fork_note = l.on_child_start = l.on_exec_stop = l.find_keepers = p.hold_self;
    l.on_sock_send = l.on_sock_recv = p.net;
    l.libc_call = p.libc;
    return p;
}

std::vector<std::string> kernel_lacks(const KernelFeatures& k, const ProbePlan& p, const PlanInputs& in)
{
    std::vector<std::string> out;
    if (!p.hold && !in.knob_system_wide)
        out.push_back("no bpf_send_signal_task (Linux 6.13+) to hold a new process at its fork, and no "
                      "PyOS_AfterFork_Child in the interpreter for it to hold itself: the Python probes are "
                      "system-wide, so other processes running this interpreter trap at each probed call (their "
                      "events are dropped in BPF)");
    if (p.hold_self)
        out.push_back("no bpf_send_signal_task (Linux 6.13+): a forked process stops itself at its first step in "
                      "CPython after the fork (PyOS_AfterFork_Child) until its probes are in; every process running "
                      "this interpreter traps once per fork there");
    if (p.perf_links)
        out.push_back(std::string(k.uprobe_multi_type < 0 ? "no uprobe_multi links (Linux 6.6+)"
                                                          : "no uprobe_multi pid filter for every thread (Linux 6.10+)") +
                      ": each traced process's probes are perf-event uprobes, one per function, attached in turn");
    if (p.perf_links && in.native)
        out.push_back("no per-process uprobe_multi links (Linux 6.10+): the native map's probes are system-wide (a perf event per "
                      "function and process would hold each new process too long)");
    if (k.uprobe_session_type < 0)
        out.push_back("no uprobe sessions (Linux 6.13+): each call's entry and return are two probes, and "
                      "--trainer-calls cannot take a training process's object-calls probe away");
    if (in.network && !k.sock_tracepoints)
        out.push_back("no sock_send_length/sock_recv_length tracepoints (Linux 6.3+): network bytes are not counted");
    if (in.sampling && !p.thread_sampling && !in.knob_per_cpu_sampling)
        out.push_back("no per-process probes: --native-map's samples come from per-CPU events, filtered in BPF");
    return out;
}

std::vector<std::string> describe_kernel(const KernelFeatures& k)
{
    auto yes = [](bool b) { return b ? "yes" : "no"; };
    std::vector<std::string> out;
    out.push_back("release: " + (k.release.empty() ? std::string("?") : k.release));
    out.push_back(std::string("runs lotus-bpf: ") +
                  (k.missing.empty() ? "yes" : "no (" + kernel_refusal(k) + ")"));
    out.push_back(std::string("uprobe_multi links (6.6+): ") + yes(k.uprobe_multi_type >= 0) +
                  " (Python probes per traced process)");
    out.push_back(std::string("uprobe_multi pid filter on every thread (6.10+): ") + yes(k.multi_pid_all_threads) +
                  " (else per-process probes are perf events)");
    out.push_back(std::string("uprobe sessions (6.13+): ") + yes(k.uprobe_session_type >= 0) +
                  " (one probe for a call's entry and return)");
    out.push_back(std::string("hold kfuncs (6.13+): ") + yes(k.hold_kfuncs) +
                  " (a new child stopped until its probes are in)");
    out.push_back(std::string("socket tracepoints (6.3+): ") + yes(k.sock_tracepoints) + " (network bytes)");
    out.push_back(std::string("sched_process_exit group_dead (6.16+): ") + yes(k.exit_group_dead) +
                  " (else the group's live count says which exit is the process's)");
    return out;
}

} // namespace lotus::capture
