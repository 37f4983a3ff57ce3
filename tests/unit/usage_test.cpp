// model::UsageTracker and the usage table from synthetic records: /proc readings in sweeps, forks, exits.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdio>
#include <vector>

#include "export/usage_summary.h"
#include "lotus_abi.h"
#include "model/usage.h"

using namespace lotus;

namespace {

constexpr uint64_t MS = 1'000'000, S = 1'000'000'000;

struct Usage : ::testing::Test {
    std::vector<model::UsagePoint> points;
    model::UsageTracker tracker{[this](const model::UsagePoint& p) { points.push_back(p); }};

    // A reading of pid at ts: CPU (ms), RSS/HWM (MB), PSS (MB, -1: not read), storage bytes, switches.
    void read(uint32_t pid, uint64_t ts, uint64_t user_ms, uint64_t system_ms, uint64_t rss_mb, int64_t pss_mb = -1,
              uint64_t read_bytes = 0, uint64_t nvcsw = 0, uint64_t hwm_mb = 0)
    {
        model::RecordUsage r{model::kRecordUsage, pid, pid, 0, ts, user_ms * MS, system_ms * MS, rss_mb * 1024,
                             (hwm_mb ? hwm_mb : rss_mb) * 1024, pss_mb < 0 ? model::kNoPss : uint64_t(pss_mb) * 1024,
                             read_bytes, 0, nvcsw, 0, 1, 0, 0, 0, model::kNoPss, model::kNoPss, model::kNoPss};
        tracker.consume(&r, sizeof(r));
    }
    void fork(uint32_t child, uint32_t parent, uint64_t ts)
    {
        lotus_proc_event e{};
        e.h = {LOTUS_EV_FORK, child, child, 0, ts};
        e.parent_tgid = parent;
        tracker.consume(&e, sizeof(e));
    }
    void exit(uint32_t pid, uint64_t ts, uint64_t runtime_ms, uint64_t utime_ms, uint64_t stime_ms,
              uint64_t read_bytes = 0, uint64_t nvcsw = 0)
    {
        lotus_usage u{};
        u.h = {LOTUS_EV_USAGE, pid, pid, 0, ts};
        u.runtime_ns = runtime_ms * MS;
        u.utime_ns = utime_ms * MS;
        u.stime_ns = stime_ms * MS;
        u.read_bytes = read_bytes;
        u.nvcsw = nvcsw;
        tracker.consume(&u, sizeof(u));
    }
};

} // namespace

TEST_F(Usage, IntervalsBetweenReadingsAndTotalsFromTheFirst)
{
    // A process alive when tracing began: its figures count from its first reading.
    read(1, 10 * S, 5000, 1000, 100, 80, 1'000'000, 50);
    read(1, 10 * S + 100 * MS, 5060, 1010, 110, -1, 1'500'000, 60);
    read(1, 10 * S + 200 * MS, 5060, 1010, 120, -1, 1'500'000, 60);
    tracker.finish();
    ASSERT_EQ(points.size(), 2u);
    EXPECT_NEAR(points[0].user_pct, 60, 1e-9);
    EXPECT_NEAR(points[0].system_pct, 10, 1e-9);
    EXPECT_NEAR(points[0].rss_mb, 110, 1e-9);
    EXPECT_EQ(points[0].pss_mb, -1);
    EXPECT_NEAR(points[0].read_bps, 5'000'000, 1e-3);
    EXPECT_NEAR(points[0].voluntary_cs_ps, 100, 1e-9);
    EXPECT_NEAR(points[1].user_pct, 0, 1e-9);
    const auto& u = tracker.processes().at(1);
    EXPECT_EQ(u.user_ns, 60 * MS); // while traced, not since it started
    EXPECT_EQ(u.system_ns, 10 * MS);
    EXPECT_EQ(u.read_bytes, 500'000u);
    EXPECT_EQ(u.readings, 3u);
    EXPECT_FALSE(u.exact_end);
    EXPECT_EQ(u.peak_pss_kb, 80u * 1024);
    EXPECT_NEAR(u.peak_cpu_pct, 35, 1e-9); // traced 200 ms only: its mean over them
}

TEST_F(Usage, ForkedProcessesFromZeroAndExitsExact)
{
    fork(2, 1, 1 * S);
    read(2, 1 * S + 50 * MS, 40, 0, 50);   // 80 % over the 50 ms since its fork
    read(2, 1 * S + 150 * MS, 120, 10, 60);
    // its exit: the scheduler's exact 200 ms, split 3:1 as its ticks were
    exit(2, 1 * S + 180 * MS, 200, 150, 50, 4096, 9);
    tracker.finish();
    const auto& u = tracker.processes().at(2);
    EXPECT_TRUE(u.forked);
    EXPECT_TRUE(u.exact_end);
    EXPECT_EQ(u.first_ns, 1 * S);
    EXPECT_EQ(u.last_ns, 1 * S + 180 * MS);
    EXPECT_EQ(u.user_ns, 150 * MS);
    EXPECT_EQ(u.system_ns, 50 * MS);
    EXPECT_EQ(u.read_bytes, 4096u);
    EXPECT_EQ(u.nvcsw, 9u);
    ASSERT_EQ(points.size(), 2u);
    EXPECT_NEAR(points[0].user_pct, 80, 1e-9);
    EXPECT_NEAR(u.peak_cpu_pct, 100.0 * 200 / 180, 1e-9); // its whole life, shorter than 1 s

    // A process forked and gone between two sweeps still counts.
    fork(3, 1, 2 * S);
    exit(3, 2 * S + 30 * MS, 30, 3, 0);
    EXPECT_EQ(tracker.processes().at(3).user_ns, 30 * MS);
}

TEST_F(Usage, AnExitWhoseTicksOverflowSplitsWithinItsRuntime)
{
    // A damaged record file (the fuzzer's find): utime + stime wraps around 64 bits. The split stays within
    // the exact runtime, with no undefined conversion.
    fork(4, 1, 1 * S);
    lotus_usage u{};
    u.h = {LOTUS_EV_USAGE, 4, 4, 0, 2 * S};
    u.runtime_ns = ~0ull;
    u.utime_ns = ~0ull - 5;
    u.stime_ns = 10;
    tracker.consume(&u, sizeof(u));
    const auto& p = tracker.processes().at(4);
    EXPECT_EQ(p.user_ns, ~0ull); // ticks almost all user: all of it (the unchecked conversion gave 2^63 here)
    EXPECT_EQ(p.system_ns, 0u);
}

TEST_F(Usage, PeaksOverOneSecondAndTheJobsSums)
{
    // Two processes read together every 250 ms for 2 s: process 1 busy 100 % the first second then 20 %,
    // process 2 always 50 %.
    uint64_t c1 = 0, c2 = 0;
    for (int i = 0; i <= 8; i++) {
        uint64_t ts = 10 * S + static_cast<uint64_t>(i) * 250 * MS;
        read(1, ts, c1, 0, 100, i % 4 == 0 ? 60 : -1);
        read(2, ts, c2, 0, 200, i % 4 == 0 ? 70 : -1);
        c1 += i < 4 ? 250 : 50;
        c2 += 125;
    }
    tracker.finish();
    EXPECT_NEAR(tracker.processes().at(1).peak_cpu_pct, 100, 1e-9);
    EXPECT_NEAR(tracker.processes().at(2).peak_cpu_pct, 50, 1e-9);
    const auto& j = tracker.job();
    EXPECT_EQ(j.sweeps, 9u);
    EXPECT_NEAR(j.peak_cpu_pct, 150, 1e-9);
    EXPECT_EQ(j.peak_rss_sum_kb, 300u * 1024);
    EXPECT_EQ(j.peak_pss_sum_kb, 130u * 1024); // only sweeps where every process's PSS was read

    std::map<uint32_t, model::ProcessInfo> procs;
    procs[1].root = true;
    procs[2].parent = 1;
    procs[2].worker = true;
    procs[2].worker_id = 0;
    procs[2].owner = 1;
    auto rows = exporter::usage_rows(tracker, procs);
    ASSERT_EQ(rows.size(), 3u);
    EXPECT_EQ(rows[0].role, "main");
    EXPECT_EQ(rows[1].role, "worker 0");
    EXPECT_EQ(rows[2].role, "job");
    EXPECT_NEAR(rows[0].user_s, 1.2, 1e-9);
    EXPECT_NEAR(rows[0].cpu_avg_pct, 60, 1e-9);
    EXPECT_NEAR(rows[2].cpu_avg_pct, 110, 1e-9);
    EXPECT_NEAR(rows[2].rss_avg_mb, 300, 1e-9);
    EXPECT_NEAR(rows[2].pss_peak_mb, 130, 1e-9);
    EXPECT_FALSE(rows[2].exact); // still running at the end
    auto json = exporter::usage_json(rows, 250);
    EXPECT_NE(json.find("\"interval_ms\":250"), std::string::npos);
    EXPECT_NE(json.find("\"role\":\"job\""), std::string::npos);
}

TEST_F(Usage, CsvRowsWithTheirProcessLabels)
{
    exporter::UsageCsv csv;
    model::UsageTracker t([&](const model::UsagePoint& p) { csv.add(p); });
    model::RecordUsage a{model::kRecordUsage, 7, 7, 0, 2 * S, 0, 0, 1024, 1024, model::kNoPss, 0, 0, 0, 0, 1, 0, 0, 0,
                         model::kNoPss, model::kNoPss, model::kNoPss};
    model::RecordUsage b = a;
    b.ts_ns = 2 * S + 100 * MS;
    b.user_ns = 50 * MS;
    t.consume(&a, sizeof(a));
    t.consume(&b, sizeof(b));
    std::map<uint32_t, model::ProcessInfo> procs;
    procs[7].root = true;
    std::string text = csv.text(procs, 1 * S);
    EXPECT_EQ(text.substr(0, text.find('\n')),
              "time_s,interval_s,pid,process,cpu_user_pct,cpu_system_pct,rss_mb,pss_mb,read_bytes_per_s,"
              "write_bytes_per_s,voluntary_cs_per_s,involuntary_cs_per_s,net_sent_bytes_per_s,net_recv_bytes_per_s");
    // network bytes not counted: empty, not 0
    EXPECT_NE(text.find("\n1.100,0.100,7,main,50.0,0.0,1.00,,0,0,0.0,0.0,,\n"), std::string::npos) << text;
}

namespace {

model::RecordUsage net_reading(uint32_t pid, uint64_t ts, uint64_t sent, uint64_t recv, bool counted = true)
{
    return model::RecordUsage{model::kRecordUsage, pid, pid, 0, ts, 0, 0, 1024, 1024, model::kNoPss, 0, 0, 0, 0, 1,
                              counted ? model::kUsageNet : 0u, sent, recv, model::kNoPss, model::kNoPss, model::kNoPss};
}

lotus_usage net_exit(uint32_t pid, uint64_t ts, uint64_t sent, uint64_t recv, bool counted = true)
{
    lotus_usage u{};
    u.h = {LOTUS_EV_USAGE, pid, pid, 0, ts};
    u.net_counted = counted;
    u.net_sent = sent;
    u.net_recv = recv;
    return u;
}

} // namespace

TEST_F(Usage, NetworkBytesFromTheFirstReadingAndExactAtExit)
{
    // alive at the start (counting began at attach: its first reading is the base), then a forked worker
    for (auto r : {net_reading(1, 1 * S, 100, 50), net_reading(1, 2 * S, 1100, 2050)})
        tracker.consume(&r, sizeof(r));
    fork(2, 1, 1 * S + 500 * MS);
    auto w = net_reading(2, 2 * S, 300, 0);
    tracker.consume(&w, sizeof(w));
    auto x = net_exit(2, 2 * S + 10 * MS, 700, 40);
    tracker.consume(&x, sizeof(x));
    tracker.finish();
    const auto& main = tracker.processes().at(1);
    EXPECT_TRUE(main.net_known());
    EXPECT_EQ(main.net_sent, 1000u);
    EXPECT_EQ(main.net_recv, 2000u);
    const auto& worker = tracker.processes().at(2);
    EXPECT_TRUE(worker.net_known());
    EXPECT_EQ(worker.net_sent, 700u); // from zero at its fork, to the kernel's count at its exit
    EXPECT_EQ(worker.net_recv, 40u);
    ASSERT_EQ(points.size(), 2u);
    EXPECT_NEAR(points[0].sent_bps, 1000, 1e-9);
    EXPECT_NEAR(points[0].recv_bps, 2000, 1e-9);
    auto rows = exporter::usage_rows(tracker, {});
    ASSERT_FALSE(rows.empty());
    EXPECT_TRUE(rows.back().net_known);
    EXPECT_NEAR(rows.back().net_sent_mb, 1700 / 1e6, 1e-12);
    EXPECT_NE(exporter::usage_json(rows, 100).find("\"network\":true"), std::string::npos);
}

TEST_F(Usage, AReadingAfterTheExitTookTheNetworkEntryCountsNothingTwice)
{
    // The sweep read both processes after their exits had taken their entries (0) and before their exit records
    // came: the exit counts from the highest base, not from that 0.
    fork(2, 1, 1 * S + 500 * MS);
    for (auto r : {net_reading(1, 1 * S, 100, 50), net_reading(2, 2 * S, 300, 0), net_reading(1, 2 * S, 1100, 2050),
                   net_reading(2, 3 * S, 0, 0), net_reading(1, 3 * S, 0, 0)})
        tracker.consume(&r, sizeof(r));
    for (auto x : {net_exit(2, 2 * S + 900 * MS, 700, 40), net_exit(1, 2 * S + 950 * MS, 1100, 2050)})
        tracker.consume(&x, sizeof(x));
    tracker.finish();
    EXPECT_EQ(tracker.processes().at(1).net_sent, 1000u);
    EXPECT_EQ(tracker.processes().at(1).net_recv, 2000u);
    EXPECT_EQ(tracker.processes().at(2).net_sent, 700u);
    EXPECT_EQ(tracker.processes().at(2).net_recv, 40u);
}

TEST_F(Usage, AReadingAfterTheExitFiguresCountsNothingAgain)
{
    // The sweep read a forked worker after its exit figures came (its exit record was still to come): that
    // reading would count from its fork again.
    fork(2, 1, 1 * S);
    auto w = net_reading(2, 2 * S, 300, 10);
    tracker.consume(&w, sizeof(w));
    auto x = net_exit(2, 2 * S + 900 * MS, 700, 40);
    tracker.consume(&x, sizeof(x));
    auto late = net_reading(2, 3 * S, 0, 0);
    late.user_ns = 5 * S;
    tracker.consume(&late, sizeof(late));
    tracker.consume(&x, sizeof(x)); // and the same figures twice
    tracker.finish();
    const auto& u = tracker.processes().at(2);
    EXPECT_EQ(u.net_sent, 700u);
    EXPECT_EQ(u.net_recv, 40u);
    EXPECT_EQ(u.user_ns, 0u);
    EXPECT_EQ(u.readings, 1u);
}

TEST_F(Usage, APidReusedAfterALostExitCountsFromItsFork)
{
    auto a = net_reading(5, 1 * S, 100, 100);
    tracker.consume(&a, sizeof(a));
    fork(5, 1, 2 * S); // the first process's exit record was lost
    auto b = net_reading(5, 3 * S, 30, 20);
    tracker.consume(&b, sizeof(b));
    tracker.finish();
    EXPECT_EQ(tracker.processes().at(5).net_sent, 30u);
    EXPECT_EQ(tracker.processes().at(5).net_recv, 20u);
}

TEST_F(Usage, NetworkBytesNotCountedAreUnknownNotZero)
{
    // a kernel without the socket tracepoints, and a record file made before the fields existed
    auto a = net_reading(1, 1 * S, 0, 0, false), b = net_reading(1, 2 * S, 0, 0, false);
    tracker.consume(&a, sizeof(a));
    tracker.consume(&b, offsetof(model::RecordUsage, net_sent)); // the older, shorter record
    auto c = net_reading(3, 1 * S, 0, 0), d = net_reading(3, 2 * S, 10, 10);
    tracker.consume(&c, sizeof(c));
    tracker.consume(&d, sizeof(d));
    tracker.finish();
    EXPECT_FALSE(tracker.processes().at(1).net_known());
    EXPECT_TRUE(tracker.processes().at(3).net_known());
    ASSERT_EQ(points.size(), 2u);
    EXPECT_LT(points[0].sent_bps, 0); // unknown, never a 0 that looks measured
    auto rows = exporter::usage_rows(tracker, {});
    EXPECT_FALSE(rows.back().net_known); // the job: one of its processes was not counted
    auto json = exporter::usage_json(rows, 100);
    EXPECT_NE(json.find("\"network\":false"), std::string::npos);
    EXPECT_NE(json.find("\"net_sent_mb\":null"), std::string::npos);
}

namespace {

// A process's cgroup reading (RecordCgroup): quota (-1: none), cpuset size, memory limit, cpu.stat so far.
model::RecordCgroup cgroup_reading(uint32_t pid, uint64_t ts, const char* path, int64_t quota_us, unsigned cpuset_cpus,
                                   uint64_t memory, uint64_t periods, uint64_t throttled, uint64_t throttled_ms,
                                   uint32_t flags = model::kCgroupQuota | model::kCgroupCpuset | model::kCgroupMemory |
                                                    model::kCgroupThrottle | model::kCgroupV1)
{
    model::RecordCgroup r{};
    r.type = model::kRecordCgroup;
    r.tgid = r.tid = pid;
    r.ts_ns = ts;
    r.flags = flags;
    r.quota_us = quota_us;
    r.period_us = 100000;
    r.cpuset_cpus = cpuset_cpus;
    r.memory_limit = memory;
    r.periods = periods;
    r.throttled_periods = throttled;
    r.throttled_ns = throttled_ms * MS;
    snprintf(r.path, sizeof(r.path), "%s", path);
    snprintf(r.cpuset, sizeof(r.cpuset), "0-%u", cpuset_cpus - 1);
    return r;
}

} // namespace

// Each process's row gets its cgroup's throttling while it lived: from its first reading, or for a child forked
// while traced from its parent's last reading before the fork, to its last one (its exit's). The job's is each
// cgroup's over the run, counted once.
TEST_F(Usage, ThrottlingPerProcessIsItsCgroupsWhileItLived)
{
    auto feed = [&](model::RecordCgroup r) { tracker.consume(&r, sizeof(r)); };
    read(1, 1 * S, 0, 0, 100);
    feed(cgroup_reading(1, 1 * S, "/job", 100000, 2, 1ull << 30, 10, 2, 30));
    fork(2, 1, 1 * S + 10 * MS);
    read(1, 2 * S, 500, 0, 100);
    read(2, 2 * S, 400, 0, 100);
    feed(cgroup_reading(1, 2 * S, "/job", 100000, 2, 1ull << 30, 20, 9, 300));
    feed(cgroup_reading(2, 2 * S, "/job", 100000, 2, 1ull << 30, 20, 9, 300));
    exit(2, 2 * S + 500 * MS, 900, 90, 0);
    feed(cgroup_reading(2, 2 * S + 600 * MS, "/job", 100000, 2, 1ull << 30, 25, 12, 400)); // after its exit
    read(1, 3 * S, 1000, 0, 100);
    feed(cgroup_reading(1, 3 * S, "/job", 100000, 2, 1ull << 30, 30, 15, 500));
    tracker.finish();
    const auto& p = tracker.processes();
    ASSERT_TRUE(p.at(1).throttle_known);
    EXPECT_EQ(p.at(1).periods, 20u);
    EXPECT_EQ(p.at(1).throttled_periods, 13u);
    EXPECT_EQ(p.at(1).throttled_ns, 470 * MS);
    ASSERT_TRUE(p.at(2).throttle_known); // from its parent's reading before its fork
    EXPECT_EQ(p.at(2).throttled_periods, 10u);
    EXPECT_EQ(p.at(2).throttled_ns, 370 * MS);
    auto l = tracker.limits();
    ASSERT_TRUE(l.known);
    EXPECT_EQ(l.cgroups, 1u);
    EXPECT_TRUE(l.have_throttle);
    EXPECT_EQ(l.throttled_periods, 13u); // the cgroup's once, not each process's
    EXPECT_EQ(l.throttled_ns, 470 * MS);
    EXPECT_DOUBLE_EQ(l.quota_cpus(), 1.0);
    EXPECT_DOUBLE_EQ(l.cpus(), 1.0);
    auto rows = exporter::usage_rows(tracker, {});
    ASSERT_FALSE(rows.empty());
    EXPECT_TRUE(rows.back().throttle_known);
    EXPECT_EQ(rows.back().throttled_periods, 13u);
    EXPECT_NEAR(rows.back().throttled_s, 0.47, 1e-9);
}

// The job's limits are the tightest its processes' readings name; the CPUs they allow, the fewer of the quota and
// the cpuset; a figure no reading had is not known, never assumed.
TEST_F(Usage, JobLimitsAreTheTightestAndWhatWasNotReadIsNotKnown)
{
    auto feed = [&](model::RecordCgroup r) { tracker.consume(&r, sizeof(r)); };
    EXPECT_FALSE(tracker.limits().known);
    feed(cgroup_reading(1, 1 * S, "/a", -1, 4, model::kNoMemoryLimit, 0, 0, 0));
    auto l = tracker.limits();
    EXPECT_TRUE(l.have_quota);
    EXPECT_EQ(l.quota_cpus(), 0); // no quota
    EXPECT_DOUBLE_EQ(l.cpus(), 4); // the cpuset
    EXPECT_EQ(l.memory_limit, model::kNoMemoryLimit);
    feed(cgroup_reading(2, 1 * S, "/a/b", 250000, 3, 1ull << 29, 0, 0, 0));
    l = tracker.limits();
    EXPECT_EQ(l.cgroups, 2u);
    EXPECT_DOUBLE_EQ(l.cpus(), 2.5);
    EXPECT_EQ(l.memory_limit, 1ull << 29);
    EXPECT_EQ(l.cpuset_cpus, 3u);

    model::UsageTracker unread;
    auto r = cgroup_reading(3, 1 * S, "/c", 50000, 2, 1ull << 30, 0, 0, 0, model::kCgroupThrottle | model::kCgroupV2);
    unread.consume(&r, sizeof(r));
    auto u = unread.limits();
    EXPECT_TRUE(u.known);
    EXPECT_FALSE(u.have_quota);
    EXPECT_FALSE(u.have_cpuset);
    EXPECT_FALSE(u.have_memory);
    EXPECT_EQ(u.cpus(), 0); // nothing said: not known
}
