// Which programs a run loads, from the kernel's features and the run's wishes (capture/probe_plan.h): checked
// without root or BPF, for the kernels and interpreters users have.
#include <gtest/gtest.h>

#include "capture/probe_plan.h"

using namespace lotus::capture;

namespace {

KernelFeatures kernel(int multi, int session, bool kfuncs = true, bool sock = true)
{
    return KernelFeatures{multi, session, kfuncs, sock};
}
const KernelFeatures k618 = kernel(42, 43);  // 6.13+: uprobe_multi, sessions, the hold kfuncs
const KernelFeatures k66 = kernel(42, -1);   // 6.6-6.12: uprobe_multi, no sessions
const KernelFeatures k61 = kernel(-1, -1, false, false);

PlanInputs python311()
{
    PlanInputs in;
    in.interp_slots = in.interp_os_read = in.links_libc = in.libc_dlopen = true;
    return in;
}

} // namespace

TEST(ProbePlan, TheDefaultOnANewKernel)
{
    auto p = plan_probes(k618, python311());
    EXPECT_TRUE(p.session && p.slots && p.hold && p.libc && p.os_read);
    EXPECT_FALSE(p.try_syscall_events);
    EXPECT_TRUE(p.load.py_slot);
    EXPECT_FALSE(p.load.py_slot_entry || p.load.py_return || p.load.py_call || p.load.py_entry);
    EXPECT_TRUE(p.load.on_fork_hold && p.load.on_exec_hold && p.load.libc_call);
    EXPECT_FALSE(p.load.native_call || p.load.on_sample || p.load.on_sock_send || p.load.py_resume);
}

TEST(ProbePlan, WithoutSessionsAnEntryAndAReturn)
{
    auto p = plan_probes(k66, python311());
    EXPECT_FALSE(p.session);
    EXPECT_TRUE(p.hold);
    EXPECT_TRUE(p.load.py_slot_entry && p.load.py_return);
    EXPECT_FALSE(p.load.py_slot);
    EXPECT_FALSE(p.libc); // libc's wrappers need sessions: the syscalls' own events instead
    EXPECT_TRUE(p.try_syscall_events);
}

TEST(ProbePlan, AnOldKernelProbesSystemWideAndHoldsNothing)
{
    auto in = python311();
    in.network = in.sampling = true;
    auto p = plan_probes(k61, in);
    EXPECT_FALSE(p.hold || p.load.on_fork_hold || p.thread_sampling || p.net || p.libc);
    EXPECT_TRUE(p.load.on_sample); // per CPU
    EXPECT_TRUE(p.load.py_slot_entry && p.load.py_return);
}

TEST(ProbePlan, TheEvaluatorForSpansOrWhereNoSlotTable)
{
    auto in = python311();
    in.evaluator = true;
    auto p = plan_probes(k618, in);
    EXPECT_FALSE(p.slots);
    EXPECT_TRUE(p.load.py_call);
    EXPECT_FALSE(p.os_read); // os.read is probed in the slots' session only
    in = python311();
    in.interp_slots = false;
    EXPECT_TRUE(plan_probes(k618, in).load.py_call);
    in = python311();
    in.knob_evaluator = true;
    EXPECT_TRUE(plan_probes(k618, in).load.py_call);
}

TEST(ProbePlan, NativeMapSamplingAndNetwork)
{
    auto in = python311();
    in.native = in.sampling = in.network = true;
    auto p = plan_probes(k618, in);
    EXPECT_TRUE(p.load.native_call);
    EXPECT_TRUE(p.thread_sampling && p.load.unsampled_threads && p.load.on_sample);
    EXPECT_TRUE(p.net && p.load.on_sock_send && p.load.on_sock_recv);
    in.libc_dlopen = false; // the native map needs libc's dlopen: without it, the syscalls' events
    p = plan_probes(k618, in);
    EXPECT_FALSE(p.libc);
    EXPECT_TRUE(p.try_syscall_events);
    p = plan_probes(k66, in);
    EXPECT_TRUE(p.load.native_call); // plain uprobes on every kernel: no return probe (they break C++ exceptions)
    EXPECT_FALSE(plan_probes(kernel(42, 43, true, false), in).net); // before 6.3: no socket tracepoints
}

TEST(ProbePlan, TheKnobs)
{
    auto in = python311();
    in.sampling = true;
    in.knob_per_cpu_sampling = true;
    auto p = plan_probes(k618, in);
    EXPECT_FALSE(p.thread_sampling);
    EXPECT_TRUE(p.load.on_sample);
    in = python311();
    in.knob_system_wide = true;
    EXPECT_FALSE(plan_probes(k618, in).hold);
    in = python311();
    in.knob_raw_syscalls = true;
    p = plan_probes(k618, in);
    EXPECT_FALSE(p.libc || p.try_syscall_events); // every syscall's tracepoint
    in = python311();
    in.knob_syscall_events = true;
    p = plan_probes(k618, in);
    EXPECT_FALSE(p.libc);
    EXPECT_TRUE(p.try_syscall_events);
    in = python311();
    in.knob_libc_read = true;
    p = plan_probes(k618, in);
    EXPECT_TRUE(p.libc);
    EXPECT_FALSE(p.os_read);
}

TEST(ProbePlan, InlinedCallsAddTheirHandlers)
{
    auto in = python311();
    in.evaluator = in.inline_calls = true;
    auto p = plan_probes(k618, in);
    EXPECT_TRUE(p.load.py_resume && p.load.py_retval && p.load.py_call);
}

namespace {

PlanInputs python311_after_fork()
{
    auto in = python311();
    in.interp_after_fork = true;
    return in;
}

bool mentions(const std::vector<std::string>& lines, const std::string& what)
{
    for (const auto& l : lines)
        if (l.find(what) != std::string::npos)
            return true;
    return false;
}

} // namespace

TEST(ProbePlan, WithoutTheHoldKfuncsAChildHoldsItself)
{
    const KernelFeatures k612 = kernel(42, -1, false, true); // 6.6-6.12: uprobe_multi, no bpf_send_signal_task
    auto in = python311_after_fork();
    in.sampling = true;
    auto p = plan_probes(k612, in);
    EXPECT_TRUE(p.hold && p.hold_self);
    EXPECT_FALSE(p.perf_links); // uprobe_multi links with the process's pid
    EXPECT_TRUE(p.load.on_fork_note && p.load.on_child_start && p.load.on_exec_stop && p.load.find_keepers);
    EXPECT_FALSE(p.load.on_fork_hold || p.load.on_exec_hold);
    EXPECT_TRUE(p.thread_sampling); // per traced thread, as the processes are known before they run
    EXPECT_TRUE(p.load.py_slot_entry && p.load.py_return);
}

TEST(ProbePlan, BeforeUprobeMultiEachProcessGetsPerfEventProbes)
{
    auto p = plan_probes(k61, python311_after_fork());
    EXPECT_TRUE(p.hold && p.hold_self && p.perf_links);
    EXPECT_FALSE(p.libc); // libc's wrappers need sessions
    auto in = python311_after_fork();
    in.knob_system_wide = true;
    p = plan_probes(k61, in);
    EXPECT_FALSE(p.hold || p.hold_self || p.perf_links || p.load.on_child_start);
    // The kfuncs' hold where the kernel has them: the child is stopped at its fork, before it runs at all.
    p = plan_probes(k618, python311_after_fork());
    EXPECT_TRUE(p.hold && !p.hold_self && p.load.on_fork_hold && !p.load.on_child_start);
}

TEST(ProbePlan, AKernelWithoutWhatLotusNeedsIsRefusedInOneLine)
{
    KernelFeatures k510 = k61;
    k510.release = "5.10.0-32-cloud-amd64";
    EXPECT_EQ(kernel_refusal(k510), "");
    k510.missing = {"BPF task storage (5.11)", "bpf_get_attach_cookie (5.15)"};
    auto line = kernel_refusal(k510);
    EXPECT_EQ(line, "Linux 5.15 or later is needed: this kernel (5.10.0-32-cloud-amd64) has no BPF task storage "
                    "(5.11), bpf_get_attach_cookie (5.15)");
    EXPECT_EQ(line.find('\n'), std::string::npos);
}

TEST(ProbePlan, PerfEventUprobesWithoutCapSysAdminAreRefusedInOneLine)
{
    // uprobe_multi links need CAP_BPF and CAP_PERFMON only; the uprobe PMU's perf events CAP_SYS_ADMIN.
    EXPECT_EQ(capability_refusal(k618, false, false), "");
    EXPECT_EQ(capability_refusal(k66, false, false), "");
    EXPECT_EQ(capability_refusal(k61, true, false), "");
    KernelFeatures old = k61;
    old.release = "6.1.0-50-cloud-amd64";
    auto line = capability_refusal(old, false, true);
    EXPECT_NE(line.find("6.1.0-50-cloud-amd64"), std::string::npos) << line;
    EXPECT_NE(line.find("no uprobe_multi links (Linux 6.6+)"), std::string::npos) << line;
    EXPECT_NE(line.find("CAP_SYS_ADMIN"), std::string::npos) << line;
    EXPECT_EQ(line.find('\n'), std::string::npos);
    KernelFeatures k68 = k66; // 6.6-6.9: their pid filter passes a process's main thread only
    k68.multi_pid_all_threads = false;
    EXPECT_NE(capability_refusal(k68, false, true).find("pid filter for every thread (Linux 6.10+)"), std::string::npos);
    EXPECT_EQ(capability_refusal(k68, true, false), "");
    // 6.10-6.12: a kfunc the object declares is absent, and libbpf 1.1 fails on the modules' BTF it may not list.
    KernelFeatures k612 = k66;
    k612.release = "6.12.95";
    k612.kfuncs_absent = {"bpf_send_signal_task"};
    auto kfunc = capability_refusal(k612, false, false);
    EXPECT_NE(kfunc.find("no bpf_send_signal_task"), std::string::npos) << kfunc;
    EXPECT_NE(kfunc.find("CAP_SYS_ADMIN"), std::string::npos) << kfunc;
    EXPECT_EQ(capability_refusal(k612, false, true), ""); // libbpf 1.2+
    EXPECT_EQ(capability_refusal(k612, true, false), "");
}

TEST(ProbePlan, WhatAKernelCannotGiveIsSaid)
{
    EXPECT_TRUE(kernel_lacks(k618, plan_probes(k618, python311_after_fork()), python311_after_fork()).empty());
    auto in = python311_after_fork();
    in.native = in.network = true;
    auto lacks = kernel_lacks(k61, plan_probes(k61, in), in);
    EXPECT_TRUE(mentions(lacks, "no bpf_send_signal_task (Linux 6.13+): a forked process stops itself"));
    EXPECT_TRUE(mentions(lacks, "no uprobe_multi links (Linux 6.6+): each traced process's probes"));
    EXPECT_TRUE(mentions(lacks, "the native map's probes are system-wide"));
    KernelFeatures k68 = kernel(42, -1, false, true); // 6.6-6.9: uprobe_multi's pid filter passed the main thread only
    k68.multi_pid_all_threads = false;
    auto p68 = plan_probes(k68, python311_after_fork());
    EXPECT_TRUE(p68.hold && p68.perf_links);
    EXPECT_TRUE(mentions(kernel_lacks(k68, p68, python311_after_fork()), "no uprobe_multi pid filter for every thread"));
    EXPECT_TRUE(mentions(lacks, "no uprobe sessions (Linux 6.13+)"));
    EXPECT_TRUE(mentions(lacks, "network bytes are not counted"));
    EXPECT_FALSE(mentions(lacks, "the Python probes are system-wide"));
    in = python311(); // no PyOS_AfterFork_Child: nothing holds a child, so the probes are system-wide
    lacks = kernel_lacks(k61, plan_probes(k61, in), in);
    EXPECT_TRUE(mentions(lacks, "the Python probes are system-wide"));
}
