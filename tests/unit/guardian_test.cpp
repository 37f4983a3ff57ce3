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
