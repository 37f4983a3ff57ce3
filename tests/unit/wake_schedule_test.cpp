#include <gtest/gtest.h>

#include "common/wake_schedule.h"

using lotus::common::WakeSchedule;

TEST(WakeSchedule, SleepsUntilTheEarliestDueRoundedUp)
{
    WakeSchedule w(1'000'000'000, 1000);
    w.due_at(1'100'000'000);  // a resource reading in 100 ms
    w.due_at(1'040'000'001);  // the status line in 40.000001 ms
    w.due_at(2'000'000'000);
    EXPECT_EQ(w.sleep_ms(), 41); // never wakes before it is due
}

TEST(WakeSchedule, NothingDueSleepsTheCap)
{
    EXPECT_EQ(WakeSchedule(5, 1000).sleep_ms(), 1000);
    WakeSchedule w(0, 50);
    w.due_at(10'000'000'000);
    EXPECT_EQ(w.sleep_ms(), 50);
}

TEST(WakeSchedule, SomethingOverdueWakesAtOnce)
{
    WakeSchedule w(2'000'000'000, 1000);
    w.due_at(1'900'000'000);
    w.due_at(2'500'000'000);
    EXPECT_EQ(w.sleep_ms(), 0);
    WakeSchedule now(2'000'000'000, 1000);
    now.due_at(2'000'000'000);
    EXPECT_EQ(now.sleep_ms(), 0);
}
