#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "export/worker_memory.h"

using namespace lotus;
using exporter::MemoryPoint;
using exporter::MemoryVerdict;

namespace {

// A worker read `step` samples between readings 1 s apart; f gives its private and anonymous MB at x samples read.
template <typename F>
std::vector<MemoryPoint> curve(size_t readings, double step, F f)
{
    std::vector<MemoryPoint> p;
    for (size_t i = 0; i < readings; i++) {
        double x = step * static_cast<double>(i);
        auto [priv, anon] = f(x);
        p.push_back({x, priv, anon, static_cast<double>(i)});
    }
    return p;
}

} // namespace

// Copy-on-read: private memory grows as the worker reads (pages it shared become its own) while its anonymous
// memory stays; once the whole dataset was touched, it is flat.
TEST(WorkerMemory, CopyOnReadGrowsThenFlattensWithoutAnonymousGrowth)
{
    auto p = curve(8, 500, [](double x) { return std::pair{20 + 0.04 * std::min(x, 1500.0), 400.0}; });
    auto j = exporter::judge_curve(p);
    EXPECT_EQ(j.verdict, MemoryVerdict::CopyOnRead) << j.why;
    EXPECT_TRUE(j.flattened);
    EXPECT_NEAR(j.growth_mb, 60, 1e-9);
    EXPECT_NEAR(j.copied_mb, 60, 1e-9);
    EXPECT_GT(j.rate_mb_per_1000, 0);
    EXPECT_EQ(j.shared_left_mb, -1); // Shared_Dirty not read
}

// Still copying at the end (the run ended before the dataset was all touched): copy-on-read at its rate.
TEST(WorkerMemory, CopyOnReadStillGrowingHasItsRate)
{
    auto p = curve(6, 400, [](double x) { return std::pair{10 + 0.05 * x, 300.0}; });
    auto j = exporter::judge_curve(p);
    EXPECT_EQ(j.verdict, MemoryVerdict::CopyOnRead) << j.why;
    EXPECT_FALSE(j.flattened);
    EXPECT_NEAR(j.rate_mb_per_1000, 50, 1e-6);
    EXPECT_NEAR(j.mb_per_s, 20, 1e-6); // 100 MB over 5 s
}

// A leak: new memory (anonymous memory grows with private) that keeps growing.
TEST(WorkerMemory, LeakKeepsGrowingWithItsRss)
{
    auto p = curve(8, 500, [](double x) { return std::pair{20 + 0.02 * x, 300 + 0.02 * x}; });
    auto j = exporter::judge_curve(p);
    EXPECT_EQ(j.verdict, MemoryVerdict::LeakLike) << j.why;
    EXPECT_NEAR(j.rate_mb_per_1000, 20, 1e-6);
    EXPECT_NEAR(j.new_mb, 70, 1e-6);
    EXPECT_NEAR(j.copied_mb, 0, 1e-9);
}

// The first batch's own allocations (new memory, before the second reading) do not hide the copies after them.
TEST(WorkerMemory, WarmUpAllocationsDoNotHideCopies)
{
    auto p = curve(8, 200, [](double x) {
        double warm = x > 0 ? 30 : 0;
        return std::pair{10 + warm + 0.02 * x, 300 + warm};
    });
    auto j = exporter::judge_curve(p);
    EXPECT_EQ(j.verdict, MemoryVerdict::CopyOnRead) << j.why;
    EXPECT_NEAR(j.copied_share, 1, 1e-9);
    EXPECT_NEAR(j.new_mb, 30, 1e-9);
}

// Steady: a few MB of noise; and a warm-up allocation that stops is not a leak.
TEST(WorkerMemory, SteadyAndWarmUpAreNotGrowth)
{
    auto flat = curve(8, 500, [](double x) { return std::pair{30 + (static_cast<int>(x) % 1000 ? 1.5 : 0), 300.0}; });
    EXPECT_EQ(exporter::judge_curve(flat).verdict, MemoryVerdict::Steady);
    auto warm = curve(8, 500, [](double x) { double a = x > 0 ? 40 : 0; return std::pair{20 + a, 300 + a}; });
    auto j = exporter::judge_curve(warm);
    EXPECT_EQ(j.verdict, MemoryVerdict::Steady) << j.why;
}

// Too few readings: no rate, never a guess.
TEST(WorkerMemory, TooFewReadingsAreUnknown)
{
    auto p = curve(exporter::kMinMemoryReadings - 1, 500, [](double x) { return std::pair{10 + x, 300.0}; });
    auto j = exporter::judge_curve(p);
    EXPECT_EQ(j.verdict, MemoryVerdict::Unknown);
    EXPECT_NE(j.why.find("not enough readings"), std::string::npos);
    EXPECT_EQ(j.rate_mb_per_1000, 0);
    EXPECT_TRUE(j.copying_hint) << j.why; // 1 MB a sample, all copies: said, without a rate
    EXPECT_NE(j.why.find("copy-on-read may be under way"), std::string::npos) << j.why;
    auto idle = curve(6, 0, [](double) { return std::pair{10.0, 300.0}; });
    EXPECT_EQ(exporter::judge_curve(idle).verdict, MemoryVerdict::Unknown);
}

namespace {

model::RecordUsage reading(uint32_t pid, uint64_t ts, uint64_t private_kb, uint64_t anon_kb)
{
    model::RecordUsage r{};
    r.type = model::kRecordUsage;
    r.tgid = r.tid = pid;
    r.ts_ns = ts;
    r.rss_kb = anon_kb + 100 * 1024; // and file pages
    r.anon_kb = private_kb == model::kNoPss ? model::kNoPss : anon_kb;
    r.pss_kb = private_kb == model::kNoPss ? model::kNoPss : private_kb;
    r.private_kb = private_kb;
    r.shared_dirty_kb = private_kb == model::kNoPss ? model::kNoPss : anon_kb - private_kb;
    return r;
}

model::Span sample(uint32_t pid, uint64_t end)
{
    return model::Span::make(model::SpanKind::Sample, "sample", pid, pid, end - 10, end);
}

} // namespace

// From the stream: samples counted at the first reading at or after their end, whichever comes first; a worker
// copying 1 MB per 10 samples (100 MB per 1,000) is found, and the advice names the fix and the limit.
TEST(WorkerMemory, FromRecordsAndSpans)
{
    exporter::WorkerMemory wm;
    constexpr uint64_t S = 1'000'000'000;
    std::map<uint32_t, model::ProcessInfo> procs;
    procs[1].pid = 1, procs[1].consumer = true;
    procs[7].pid = 7, procs[7].worker = true, procs[7].worker_id = 0, procs[7].parent = 1;
    for (uint64_t i = 1; i <= 6; i++) {
        // 100 samples a second; half of them arrive before the reading that covers them, half after
        for (uint64_t k = 0; k < 50; k++)
            wm.add(sample(7, i * S - S + 1 + k * (S / 100)));
        auto r = reading(7, i * S, (10 + 10 * i) * 1024, 500 * 1024);
        wm.consume(&r, sizeof(r));
        for (uint64_t k = 50; k < 100; k++)
            wm.add(sample(7, i * S - S + 1 + k * (S / 100)));
        auto rss_only = reading(7, i * S + S / 2, model::kNoPss, 500 * 1024);
        wm.consume(&rss_only, sizeof(rss_only));
    }
    auto rep = wm.finish(procs, {1000ull << 20, 600});
    ASSERT_EQ(rep.workers.size(), 1u);
    const auto& w = rep.workers[0];
    EXPECT_EQ(w.unit, "samples");
    EXPECT_EQ(w.curve.verdict, MemoryVerdict::CopyOnRead) << w.curve.why;
    EXPECT_NEAR(w.curve.rate_mb_per_1000, 100, 1e-6);
    EXPECT_EQ(w.curve.readings, 6u);
    EXPECT_EQ(rep.copy_on_read, 1u);
    ASSERT_EQ(rep.advice.size(), 1u);
    EXPECT_NE(rep.advice[0].find("numpy"), std::string::npos);
    // 10 MB/s, 400 MB of room, 430 MB it could still copy: the limit within 40 s
    EXPECT_NE(rep.advice[0].find("in about 40 s"), std::string::npos) << rep.advice[0];
    auto j = exporter::worker_memory_json(rep);
    EXPECT_EQ(j["workers"][0]["verdict"], "copy-on-read");
    EXPECT_EQ(j["workers"][0]["readings"], 6);
}

// Records made before private memory was read: said, never judged.
TEST(WorkerMemory, OlderRecordsSayPrivateMemoryUnknown)
{
    exporter::WorkerMemory wm;
    std::map<uint32_t, model::ProcessInfo> procs;
    procs[7].pid = 7, procs[7].worker = true;
    auto r = reading(7, 1000, 1024, 2048);
    wm.consume(&r, offsetof(model::RecordUsage, private_kb));
    auto rep = wm.finish(procs, {});
    EXPECT_FALSE(rep.private_known);
    EXPECT_EQ(rep.copy_on_read, 0u);
    auto lines = exporter::worker_memory_lines(rep);
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_NE(lines[0].find("not read"), std::string::npos);
}

// Sample ends kept while no reading comes are bounded; those let go of still count at the next reading.
TEST(WorkerMemory, PendingSamplesAreBoundedAndStillCounted)
{
    exporter::WorkerMemory wm;
    std::map<uint32_t, model::ProcessInfo> procs;
    procs[7].pid = 7, procs[7].worker = true;
    constexpr uint64_t S = 1'000'000'000;
    uint64_t n = exporter::WorkerMemory::kMaxPending * 3 + 5;
    for (uint64_t i = 1; i <= n; i++)
        wm.add(sample(7, 100 * S + i));
    for (uint64_t k = 0; k < 4; k++) {
        auto r = reading(7, 200 * S + k * S, (10 + k) * 1024, 300 * 1024);
        wm.consume(&r, sizeof(r));
        wm.add(sample(7, 200 * S + k * S + 1));
    }
    auto rep = wm.finish(procs, {});
    ASSERT_EQ(rep.workers.size(), 1u);
    EXPECT_EQ(rep.workers[0].read, static_cast<double>(n + 3)); // the last one's sample came after the last reading
}

// Workers whose parent is multiprocessing's forkserver (CPython 3.14's default): steady, and said to share no page
// of the training process, with the private memory each held at its first reading; a forked worker beside them is
// not counted in that note.
TEST(WorkerMemory, ForkserverWorkersAreSaidToHoldTheirOwnCopy)
{
    exporter::WorkerMemory wm;
    constexpr uint64_t S = 1'000'000'000;
    std::map<uint32_t, model::ProcessInfo> procs;
    procs[1].pid = 1, procs[1].consumer = true;
    procs[2].pid = 2, procs[2].parent = 1, procs[2].helper = "forkserver";
    for (uint32_t pid : {7u, 8u, 9u})
        procs[pid].pid = pid, procs[pid].worker = true, procs[pid].parent = pid == 9 ? 1 : 2;
    for (uint64_t i = 1; i <= 5; i++)
        for (uint32_t pid : {7u, 8u, 9u}) {
            for (uint64_t k = 0; k < 10; k++)
                wm.add(sample(pid, i * S - S / 2 + k));
            uint64_t first = pid == 7 ? 80 : pid == 8 ? 82 : 5;
            auto r = reading(pid, i * S, (first + i / 4) * 1024, 500 * 1024);
            wm.consume(&r, sizeof(r));
        }
    // one of them folded while the forkserver was still known, the others judged at the end
    wm.fold(8, procs, "worker 1");
    auto rep = wm.finish(procs, {});
    ASSERT_EQ(rep.workers.size(), 3u);
    EXPECT_EQ(rep.steady, 3u);
    std::map<uint32_t, const exporter::WorkerMemoryRow*> by_pid;
    for (const auto& w : rep.workers)
        by_pid[w.pid] = &w;
    EXPECT_TRUE(by_pid[7]->from_forkserver);
    EXPECT_TRUE(by_pid[8]->from_forkserver);
    EXPECT_FALSE(by_pid[9]->from_forkserver);
    EXPECT_NEAR(by_pid[7]->first_private_mb, 80, 1e-9);
    ASSERT_EQ(rep.advice.size(), 1u);
    EXPECT_NE(rep.advice[0].find("2 DataLoader worker process(es) were started by multiprocessing's forkserver"),
              std::string::npos) << rep.advice[0];
    EXPECT_NE(rep.advice[0].find("once it had begun reading: 80-82 MB)"), std::string::npos) << rep.advice[0];
    auto j = exporter::worker_memory_json(rep);
    EXPECT_EQ(j["workers"][0]["from_forkserver"], true);
    EXPECT_EQ(j["workers"][2]["from_forkserver"], false);
    EXPECT_EQ(j["workers"][0]["first_private_mb"], 80.0);
}

// Figures that print alike are one figure ("81 MB", not "81-81 MB").
TEST(WorkerMemory, ForkserverNoteRoundsAlikeFiguresToOne)
{
    exporter::WorkerMemoryReport r;
    for (double mb : {80.98, 80.76}) {
        exporter::WorkerMemoryRow w;
        w.from_forkserver = true, w.first_private_mb = mb, w.curve.verdict = MemoryVerdict::Steady;
        r.workers.push_back(w);
    }
    auto advice = exporter::worker_memory_advice(r, {});
    ASSERT_EQ(advice.size(), 1u);
    EXPECT_NE(advice[0].find("once it had begun reading: 81 MB)"), std::string::npos) << advice[0];
}
