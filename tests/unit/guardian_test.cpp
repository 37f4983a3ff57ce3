// The guardian's decision per held child (capture/guardian.h): what it continues, when, and what it leaves.
#include <gtest/gtest.h>
#include <unistd.h>

#include "capture/guardian.h"

using lotus::capture::GuardianAction;
using lotus::capture::GuardianView;
using lotus::capture::guardian_action;

namespace {

constexpr uint64_t kMs = 1'000'000;

lotus_hold held(uint64_t since_ms, uint32_t flags = LOTUS_HOLD_STOPPED)
{
    lotus_hold h{};
    h.since_ns = since_ms * kMs;
    h.parent_tgid = 1;
    h.flags = flags;
    return h;
}

GuardianView at(uint64_t now_ms, bool tracer_gone = false)
{
    GuardianView v;
    v.now_ns = now_ms * kMs;
    v.deadline_ns = 500 * kMs;
    v.tracer_gone = tracer_gone;
    return v;
}

} // namespace

TEST(Guardian, LeavesAHoldToTheTracerUntilItsDeadline)
{
    EXPECT_EQ(guardian_action(held(1000), at(1499)), GuardianAction::Keep);
    EXPECT_EQ(guardian_action(held(1000), at(1500)), GuardianAction::Continue);
}

TEST(Guardian, ContinuesEveryHoldOnceTheTracerIsGone)
{
    EXPECT_EQ(guardian_action(held(1000), at(1001, true)), GuardianAction::Continue);
}

TEST(Guardian, ContinuesWhatTheTracerAttachedButLeftToIt)
{
    EXPECT_EQ(guardian_action(held(1000, LOTUS_HOLD_STOPPED | LOTUS_HOLD_ATTACHED), at(1001)),
              GuardianAction::Continue);
}

TEST(Guardian, NeverContinuesAJobItsUserStopped)
{
    GuardianView v = at(5000, true);
    v.parent_stopped = true;
    EXPECT_EQ(guardian_action(held(1000), v), GuardianAction::Keep);
    EXPECT_EQ(guardian_action(held(1000, LOTUS_HOLD_STOPPED | LOTUS_HOLD_ATTACHED), v), GuardianAction::Keep);
}

TEST(Guardian, LeavesChildrenNotHeldOrContinuedToTheTracerThenForgetsThem)
{
    for (uint32_t flags : {0u, unsigned(LOTUS_HOLD_SHARED_MM), unsigned(LOTUS_HOLD_STOPPED | LOTUS_HOLD_RELEASED)}) {
        EXPECT_EQ(guardian_action(held(1000, flags), at(9000)), GuardianAction::Keep) << flags;
        EXPECT_EQ(guardian_action(held(1000, flags), at(9000, true)), GuardianAction::Forget) << flags;
    }
}

TEST(Guardian, LeavesAChildThatIsGoneToTheTracerToCount)
{
    GuardianView v = at(1001);
    v.child_gone = true;
    EXPECT_EQ(guardian_action(held(1000, LOTUS_HOLD_STOPPED | LOTUS_HOLD_RELEASED), v), GuardianAction::Keep);
    v.tracer_gone = true;
    EXPECT_EQ(guardian_action(held(1000), v), GuardianAction::Forget);
}

TEST(Guardian, ReadsAProcessStateFromProc)
{
    EXPECT_FALSE(lotus::capture::process_stopped(getpid())); // running: this test
    EXPECT_FALSE(lotus::capture::process_stopped(0x3fffffff)); // no such process
}

TEST(Guardian, AStopUnderWayIsSeenBeforeTheStateSaysIt)
{
    const char* running = "Name:\tpython3\nState:\tS (sleeping)\nTgid:\t42\nSigPnd:\t0000000000000000\n"
                          "ShdPnd:\t0000000000000000\nSigBlk:\t0000000000000000\n";
    EXPECT_FALSE(lotus::capture::stop_under_way(running));
    EXPECT_TRUE(lotus::capture::stop_under_way("Name:\tpython3\nState:\tT (stopped)\n"));
    EXPECT_TRUE(lotus::capture::stop_under_way("Name:\tpython3\nState:\tt (tracing stop)\n"));
    // kill(-pgid, SIGSTOP) lands in the thread group's pending set (bit 18: SIGSTOP), or a thread's own
    EXPECT_TRUE(lotus::capture::stop_under_way("State:\tR (running)\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000040000\n"));
    EXPECT_TRUE(lotus::capture::stop_under_way("State:\tR (running)\nSigPnd:\t0000000000040000\nShdPnd:\t0000000000000000\n"));
    // SIGTSTP (Ctrl-Z, bit 19) pending is not: a process that blocks it keeps it pending and runs on
    EXPECT_FALSE(lotus::capture::stop_under_way("State:\tR (running)\nSigPnd:\t0000000000080000\nShdPnd:\t0000000000080000\n"));
    // SIGCONT (bit 17) or SIGTERM (bit 14) pending: no stop
    EXPECT_FALSE(lotus::capture::stop_under_way("State:\tR (running)\nSigPnd:\t0000000000024000\nShdPnd:\t0000000000020000\n"));
    EXPECT_FALSE(lotus::capture::stop_under_way(""));
}

// Where the guardian goes (capture/guardian_cgroup.h): out of the tracer's cgroup, where the job is.
#include "capture/guardian_cgroup.h"

TEST(GuardianCgroup, ReadsEachHierarchyOfProcCgroup)
{
    auto lines = lotus::capture::parse_proc_cgroup("9:name=systemd:/\n4:memory:/a/b\n2:cpu,cpuacct:/\n0::/x y\n");
    ASSERT_EQ(lines.size(), 4u);
    EXPECT_EQ(lines[1].controllers, "memory");
    EXPECT_EQ(lines[1].path, "/a/b");
    EXPECT_EQ(lines[2].controllers, "cpu,cpuacct");
    EXPECT_EQ(lines[3].controllers, "");
    EXPECT_EQ(lines[3].path, "/x y");
}

TEST(GuardianCgroup, FindsTheCgroupMountsOfMountinfo)
{
    auto mounts = lotus::capture::parse_cgroup_mounts(
        "25 24 0:22 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755\n"
        "26 25 0:23 / /sys/fs/cgroup/unified rw,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
        "30 25 0:27 /kube/pod1 /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
        "31 25 0:28 / /mnt/with\\040space rw - cgroup cgroup rw,name=systemd\n");
    ASSERT_EQ(mounts.size(), 3u);
    EXPECT_EQ(mounts[0].controllers, "");
    EXPECT_EQ(mounts[0].dir, "/sys/fs/cgroup/unified");
    EXPECT_EQ(mounts[1].root, "/kube/pod1");
    EXPECT_EQ(mounts[1].controllers, "rw,cpu,cpuacct");
    EXPECT_EQ(mounts[2].dir, "/mnt/with space");
}

TEST(GuardianCgroup, TriesTheJobsCgroupThenItsAncestors)
{
    using V = std::vector<std::string>;
    EXPECT_EQ(lotus::capture::guardian_candidates("/system.slice/agent.service", "/slurm/job1/step0", "/"),
              (V{"/slurm/job1/step0", "/slurm/job1", "/slurm", "/"}));
    // Only what the mount shows; a job out of it: the hierarchy's root as mounted here.
    EXPECT_EQ(lotus::capture::guardian_candidates("/pod/tracer", "/pod/job", "/pod"), (V{"/pod/job", "/pod"}));
    EXPECT_EQ(lotus::capture::guardian_candidates("/pod/tracer", "/other/job", "/pod"), (V{"/pod"}));
    EXPECT_EQ(lotus::capture::guardian_candidates("/tracer", "/../outside", "/"), (V{"/"}));
}

TEST(GuardianCgroup, StaysWhereTheJobDiesWithTheTracersCgroup)
{
    EXPECT_TRUE(lotus::capture::guardian_candidates("/run", "/run", "/").empty());
    EXPECT_TRUE(lotus::capture::guardian_candidates("/run", "/run/lotus-bpf-7", "/").empty());
    EXPECT_TRUE(lotus::capture::guardian_candidates("/", "/anything", "/").empty());
    // A sibling whose name begins like the tracer's is not within it.
    EXPECT_EQ(lotus::capture::guardian_candidates("/run", "/runner", "/").front(), "/runner");
}

TEST(GuardianCgroup, SaysOnlyWhereItIsStuck)
{
    std::vector<lotus::capture::GuardianCgroup> placed = {{"cgroup2", "/t", "/j", "/j", "", false},
                                                          {"memory", "/t", "/", "/t", "the job's refused it", true}};
    auto note = lotus::capture::stuck_note(placed);
    ASSERT_TRUE(note);
    EXPECT_NE(note->find("memory /t (the job's refused it)"), std::string::npos) << *note;
    EXPECT_EQ(note->find("cgroup2"), std::string::npos) << *note;
    placed.pop_back();
    EXPECT_FALSE(lotus::capture::stuck_note(placed));
}
