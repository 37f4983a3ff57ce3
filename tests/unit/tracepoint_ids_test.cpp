// Tracepoint ids: the parsing of tracefs' id files, and the ids read where tracefs is not mounted (a child with
// its own mount namespace and no tracefs in it asks, against what the mounted or privately mounted one says).
#include <gtest/gtest.h>

#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include "capture/tracepoint_ids.h"

using lotus::capture::parse_ids;
using lotus::capture::tracepoint_ids;

TEST(TracepointIds, ParsesOneDecimalIdPerEvent)
{
    EXPECT_EQ(parse_ids("712\n15\n", 2), (std::vector<uint32_t>{712, 15}));
    EXPECT_EQ(parse_ids("4294967295\n", 1), (std::vector<uint32_t>{4294967295u}));
    EXPECT_FALSE(parse_ids("712\n", 2));       // an event's file missing
    EXPECT_FALSE(parse_ids("712\n15\n9\n", 2)); // more than asked
    EXPECT_FALSE(parse_ids("712", 1));          // cut short
    EXPECT_FALSE(parse_ids("7a2\n", 1));
    EXPECT_FALSE(parse_ids("\n", 1));
    EXPECT_FALSE(parse_ids("4294967296\n", 1));
    EXPECT_FALSE(parse_ids("", 1));
}

TEST(TracepointIds, ReadWithoutAMountedTracefsAndTheMountsLeftAsTheyWere)
{
    if (geteuid() != 0)
        GTEST_SKIP() << "needs root (mount namespaces)";
    const std::vector<std::string> events = {"syscalls/sys_enter_getpid", "sched/sched_switch"};
    auto expected = tracepoint_ids(events);
    ASSERT_TRUE(expected) << "no tracefs, mounted or private";
    int ends[2];
    ASSERT_EQ(pipe(ends), 0);
    pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) { // no tracefs anywhere in this namespace, then ask
        if (unshare(CLONE_NEWNS) || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr))
            _exit(2);
        umount2("/sys/kernel/tracing", MNT_DETACH);
        umount2("/sys/kernel/debug", MNT_DETACH);
        if (access("/sys/kernel/tracing/events", F_OK) == 0 || access("/sys/kernel/debug/tracing", F_OK) == 0)
            _exit(3);
        auto ids = tracepoint_ids(events);
        bool still_none = access("/sys/kernel/tracing/events", F_OK) != 0; // the private mount stayed private
        uint32_t got[2] = {ids ? (*ids)[0] : 0, ids ? (*ids)[1] : 0};
        _exit(write(ends[1], got, sizeof got) == sizeof got && ids && still_none ? 0 : 4);
    }
    close(ends[1]);
    uint32_t got[2] = {};
    ssize_t n = read(ends[0], got, sizeof got);
    close(ends[0]);
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    ASSERT_EQ(WEXITSTATUS(status), 0) << "2: no namespace, 3: tracefs still there, 4: ids not read or mount leaked";
    ASSERT_EQ(n, static_cast<ssize_t>(sizeof got));
    EXPECT_EQ((std::vector<uint32_t>{got[0], got[1]}), *expected);
}
