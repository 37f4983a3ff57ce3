#include "probe_plan.h"

#include <bpf/btf.h>
#include <cstring>
#include <initializer_list>
#include <memory>

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

} // namespace

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
    k.hold_kfuncs = kernel_has(vmlinux.get(), {"bpf_send_signal_task", "bpf_task_from_pid", "bpf_task_release"},
                               BTF_KIND_FUNC);
    k.sock_tracepoints =
        kernel_has(vmlinux.get(), {"btf_trace_sock_send_length", "btf_trace_sock_recv_length"}, BTF_KIND_TYPEDEF);
    return k;
}

ProbePlan plan_probes(const KernelFeatures& k, const PlanInputs& in)
{
    ProbePlan p;
    p.session = k.uprobe_session_type >= 0;
    // The evaluator as interpreters whose slot table is not found are probed (LOTUS_EVALUATOR_PROBE: likewise).
    p.slots = in.interp_slots && !in.evaluator && !in.knob_evaluator;
    // Per-process Python probes need uprobe_multi links (their pid filter) and the hold kfuncs to hold a new
    // child until its own are attached; LOTUS_SYSTEM_WIDE_PROBES runs as kernels without them.
    p.hold = k.uprobe_multi_type >= 0 && k.hold_kfuncs && !in.knob_system_wide;
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
    l.native_entry = l.native_return = in.native && !p.session;
    l.native_call = in.native && p.session;
    l.on_sample = in.sampling;
    l.unsampled_threads = p.thread_sampling;
    l.on_fork_hold = l.on_exec_hold = p.hold;
    l.on_sock_send = l.on_sock_recv = p.net;
    l.libc_call = p.libc;
    return p;
}

} // namespace lotus::capture
