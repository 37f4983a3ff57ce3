// /proc/stat's CPU lines as the host's CPU time on a set of CPUs (proc/host_cpu.h).
#include <gtest/gtest.h>

#include "proc/host_cpu.h"

namespace lotus {
namespace {

constexpr const char* kStat = "cpu  3772882 190213 846222 2198521 38956 0 2914 2692 0 0\n"
                              "cpu0 100 20 30 400 5 1 2 3 0 0\n"
                              "cpu1 1000 200 300 4000 50 10 20 30 7 8\n"
                              "cpu2 1 1 1 1 1 1 1 1 0 0\n"
                              "intr 12345 1 2 3\n"
                              "ctxt 999\n";

TEST(HostCpu, SumsTheCpusAsked)
{
    auto h = proc::parse_host_cpu(kStat, {0, 1}, 100); // 100 ticks a second: 10 ms each
    ASSERT_TRUE(h);
    EXPECT_EQ(h->cpus, 2u);
    // busy: user nice system irq softirq steal; total adds idle and iowait (guest is within user)
    EXPECT_EQ(h->busy_ns, (100 + 20 + 30 + 1 + 2 + 3 + 1000 + 200 + 300 + 10 + 20 + 30) * 10'000'000ull);
    EXPECT_EQ(h->total_ns, h->busy_ns + (400 + 5 + 4000 + 50) * 10'000'000ull);
    EXPECT_EQ(h->nice_ns, (20 + 200) * 10'000'000ull);
    EXPECT_EQ(proc::parse_host_cpu(kStat, {}, 100)->cpus, 3u); // all (never the "cpu" total line)
}

TEST(HostCpu, NothingToSay)
{
    EXPECT_FALSE(proc::parse_host_cpu(kStat, {7}, 100));
    EXPECT_FALSE(proc::parse_host_cpu("cpu0 1 2 3\n", {}, 100)); // cut short
    EXPECT_FALSE(proc::parse_host_cpu("", {}, 100));
    EXPECT_FALSE(proc::parse_host_cpu(kStat, {}, 0));
}

} // namespace
} // namespace lotus
