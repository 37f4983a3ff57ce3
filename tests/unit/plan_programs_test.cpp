// The probe plan applied to the BPF skeleton (capture/plan_programs.h): each program loads exactly where the plan
// says, with the attach type the kernel's links need. The skeleton is opened, never loaded: no root needed.
#include <gtest/gtest.h>

#include <bpf/libbpf.h>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "capture/plan_programs.h"
#include "capture/probe_plan.h"
#include "lotus_abi.h"
#include "lotus.skel.h"

using namespace lotus::capture;

namespace {

struct SkeletonFree {
    void operator()(lotus_bpf* s) const { lotus_bpf__destroy(s); }
};
using Skeleton = std::unique_ptr<lotus_bpf, SkeletonFree>;

KernelFeatures kernel(int multi, int session, bool kfuncs = true, bool sock = true)
{
    KernelFeatures k;
    k.uprobe_multi_type = multi;
    k.uprobe_session_type = session;
    k.hold_kfuncs = kfuncs;
    k.sock_tracepoints = sock;
    return k;
}
const KernelFeatures k618 = kernel(42, 43); // uprobe_multi, sessions, the hold kfuncs
const KernelFeatures k66 = kernel(42, -1);  // uprobe_multi, no sessions
const KernelFeatures k61 = kernel(-1, -1, false, false);

PlanInputs python311()
{
    PlanInputs in;
    in.interp_slots = in.interp_os_read = in.links_libc = in.libc_dlopen = in.interp_after_fork = true;
    return in;
}

PlanInputs all_features()
{
    PlanInputs in = python311();
    in.native = in.sampling = in.network = true;
    return in;
}

PlanInputs evaluator_inline()
{
    PlanInputs in = python311();
    in.evaluator = in.inline_calls = true;
    return in;
}

// Each program ProbePlan::load names, and its flag there.
using Load = decltype(ProbePlan::load);
std::vector<std::pair<std::function<bpf_program*(lotus_bpf*)>, std::function<bool(const Load&)>>> planned()
{
#define LOTUS_PLANNED(name) {[](lotus_bpf* s) { return s->progs.name; }, [](const Load& l) { return l.name; }}
    return {LOTUS_PLANNED(py_call),      LOTUS_PLANNED(py_entry),     LOTUS_PLANNED(py_slot),
            LOTUS_PLANNED(py_slot_entry), LOTUS_PLANNED(py_return),    LOTUS_PLANNED(py_resume),
            LOTUS_PLANNED(py_retval),    LOTUS_PLANNED(native_call),  LOTUS_PLANNED(on_sample),
            LOTUS_PLANNED(unsampled_threads), LOTUS_PLANNED(on_fork_hold), LOTUS_PLANNED(on_exec_hold),
            LOTUS_PLANNED(on_fork_note), LOTUS_PLANNED(on_child_start), LOTUS_PLANNED(on_exec_stop),
            LOTUS_PLANNED(find_keepers), LOTUS_PLANNED(on_sock_send), LOTUS_PLANNED(on_sock_recv),
            LOTUS_PLANNED(libc_call)};
#undef LOTUS_PLANNED
}

Skeleton applied(const ProbePlan& plan, const KernelFeatures& k, bool syscall_events)
{
    Skeleton skel(lotus_bpf__open());
    EXPECT_TRUE(skel) << "the skeleton does not open";
    if (skel)
        choose_programs(skel.get(), plan, k, syscall_events);
    return skel;
}

} // namespace

TEST(PlanPrograms, EachPlannedProgramLoadsExactlyWhereThePlanSays)
{
    for (const auto& k : {k618, k66, k61})
        for (const auto& in : {python311(), all_features(), evaluator_inline()}) {
            ProbePlan plan = plan_probes(k, in);
            Skeleton skel = applied(plan, k, false);
            ASSERT_TRUE(skel);
            size_t loaded = 0;
            for (const auto& [prog, flag] : planned()) {
                EXPECT_EQ(bpf_program__autoload(prog(skel.get())), flag(plan.load))
                    << bpf_program__name(prog(skel.get())) << " on a kernel with uprobe_multi " << k.uprobe_multi_type;
                loaded += flag(plan.load) ? 1 : 0;
            }
            EXPECT_GT(loaded, 0u); // (every plan probes Python somehow)
        }
}

TEST(PlanPrograms, TheExitTracepointsVariantIsThisKernels)
{
    for (bool group_dead : {true, false}) {
        KernelFeatures k = k618;
        k.exit_group_dead = group_dead;
        Skeleton skel = applied(plan_probes(k, python311()), k, false);
        ASSERT_TRUE(skel);
        EXPECT_EQ(bpf_program__autoload(skel->progs.on_exit), group_dead);
        EXPECT_EQ(bpf_program__autoload(skel->progs.on_exit_counted), !group_dead);
    }
}

TEST(PlanPrograms, SyscallsAreSeenInExactlyOnePlace)
{
    auto seen = [](lotus_bpf* s) {
        std::vector<bool> v;
        for (bpf_program* p : {s->progs.on_write, s->progs.on_getppid, s->progs.on_openat, s->progs.on_read_done,
                               s->progs.on_openat_done, s->progs.on_sys_enter, s->progs.on_sys_exit, s->progs.libc_call})
            v.push_back(bpf_program__autoload(p));
        return v;
    };
    // libc's wrappers (the default where the interpreter links a libc): neither kind of syscall tracepoint.
    ProbePlan libc = plan_probes(k618, python311());
    ASSERT_TRUE(libc.libc);
    Skeleton a = applied(libc, k618, false);
    EXPECT_EQ(seen(a.get()), (std::vector<bool>{false, false, false, false, false, false, false, true}));
    // The watched syscalls' own tracepoints, where their ids were read...
    PlanInputs no_libc = python311();
    no_libc.links_libc = false;
    ProbePlan events = plan_probes(k618, no_libc);
    ASSERT_FALSE(events.libc);
    Skeleton b = applied(events, k618, true);
    EXPECT_EQ(seen(b.get()), (std::vector<bool>{true, true, true, true, true, false, false, false}));
    // ...else every syscall's raw pair.
    Skeleton c = applied(events, k618, false);
    EXPECT_EQ(seen(c.get()), (std::vector<bool>{false, false, false, false, false, true, true, false}));
}

TEST(PlanPrograms, AttachTypesAreTheKernelsLinkTypes)
{
    Skeleton before(lotus_bpf__open());
    ASSERT_TRUE(before);
    auto untouched = bpf_program__expected_attach_type(before->progs.py_entry);
    // Sessions: the Python and libc programs are session programs; uprobe_multi: the entry/return programs.
    ProbePlan plan = plan_probes(k618, python311());
    ASSERT_TRUE(plan.session && plan.libc);
    Skeleton s = applied(plan, k618, false);
    EXPECT_EQ(bpf_program__expected_attach_type(s->progs.py_slot), static_cast<bpf_attach_type>(43));
    EXPECT_EQ(bpf_program__expected_attach_type(s->progs.py_call), static_cast<bpf_attach_type>(43));
    EXPECT_EQ(bpf_program__expected_attach_type(s->progs.libc_call), static_cast<bpf_attach_type>(43));
    EXPECT_EQ(bpf_program__expected_attach_type(s->progs.native_call), static_cast<bpf_attach_type>(42));
    EXPECT_EQ(bpf_program__expected_attach_type(s->progs.on_child_start), static_cast<bpf_attach_type>(42));
    // Without uprobe_multi links (perf-event uprobes): the programs keep the type they were compiled with.
    Skeleton old = applied(plan_probes(k61, python311()), k61, false);
    EXPECT_EQ(bpf_program__expected_attach_type(old->progs.py_entry), untouched);
    EXPECT_EQ(bpf_program__expected_attach_type(old->progs.py_slot_entry),
              bpf_program__expected_attach_type(before->progs.py_slot_entry));
}
