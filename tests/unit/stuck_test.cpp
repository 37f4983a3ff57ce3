// The stuck-process rule (model::StuckWatch) and the episodes the stream's RecordStuck tell (model::StuckEpisodes).
#include <gtest/gtest.h>

#include <cstring>

#include "model/stuck.h"

using namespace lotus::model;

namespace {

constexpr uint64_t kS = 1'000'000'000ull, kMs = 1'000'000ull;

Span span(SpanKind k, uint32_t pid, uint64_t start, uint64_t end)
{
    return Span::make(k, "x", pid, pid, start, end);
}

// A worker that prepared batches of `batch_ns` back to back until `until`.
void batches(StuckWatch& w, uint32_t pid, uint64_t batch_ns, uint64_t until)
{
    for (uint64_t t = 0; t + batch_ns <= until; t += batch_ns) {
        w.span(span(SpanKind::Sample, pid, t, t + batch_ns / 2));
        w.span(span(SpanKind::Batch, pid, t, t + batch_ns));
    }
}

} // namespace

TEST(StuckWatch, AWorkerInABatchIsStuckAfterTheFloorAndResumesAtItsNextSpan)
{
    StuckWatch w;
    batches(w, 7, 100 * kMs, 5 * kS); // last span end: 5 s
    EXPECT_EQ(w.threshold_ns(7), StuckWatch::kFloorNs) << "10 x 0.1 s is below the floor";
    auto at_work = [](uint32_t) { return std::optional<OpenWork>(OpenWork{5 * kS - 50 * kMs, 37, 9}); };
    EXPECT_TRUE(w.check(14 * kS, {7}, at_work).empty());
    auto c = w.check(15 * kS, {7}, at_work);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_TRUE(c[0].stuck);
    EXPECT_EQ(c[0].since_ns, 5 * kS) << "from its last span's end, inside the batch begun before it";
    EXPECT_EQ(c[0].work.sample, 37);
    EXPECT_EQ(c[0].work.batch, 9);
    EXPECT_EQ(w.stuck_count(), 1u);
    EXPECT_TRUE(w.check(20 * kS, {7}, at_work).empty()) << "said once";
    w.span(span(SpanKind::Sample, 7, 23 * kS, 23 * kS + kMs));
    c = w.check(24 * kS, {}, at_work); // exited by now: its resuming is still said
    ASSERT_EQ(c.size(), 1u);
    EXPECT_FALSE(c[0].stuck);
    EXPECT_EQ(c[0].at_ns, 23 * kS + kMs);
    EXPECT_EQ(w.stuck_count(), 0u);
}

TEST(StuckWatch, AProcessInNoWorkIsNeverStuck)
{
    StuckWatch w;
    batches(w, 7, 100 * kMs, 5 * kS);
    EXPECT_TRUE(w.check(500 * kS, {7}, [](uint32_t) { return std::optional<OpenWork>(); }).empty());
}

TEST(StuckWatch, WorkBegunAfterTheLastSpanCountsFromItsStart)
{
    StuckWatch w;
    batches(w, 7, 100 * kMs, 5 * kS);
    auto later = [](uint32_t) { return std::optional<OpenWork>(OpenWork{60 * kS, -1, 12}); }; // idle 55 s first
    EXPECT_TRUE(w.check(69 * kS, {7}, later).empty());
    auto c = w.check(70 * kS, {7}, later);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].since_ns, 60 * kS);
}

TEST(StuckWatch, TheThresholdIsTenMedianStepsOrTheFlag)
{
    StuckWatch w;
    batches(w, 7, 3 * kS, 60 * kS);
    EXPECT_EQ(w.threshold_ns(7), 30 * kS);
    // A training loop: its step is the time from one wait's end to the next's.
    for (uint64_t t = 1; t <= 20; t++)
        w.span(span(SpanKind::Wait, 8, t * 2 * kS - kMs, t * 2 * kS));
    EXPECT_EQ(w.threshold_ns(8), 20 * kS);
    EXPECT_EQ(w.threshold_ns(9), StuckWatch::kFloorNs) << "no step seen";
    StuckWatch fixed(3 * kS);
    batches(fixed, 7, 3 * kS, 60 * kS);
    EXPECT_EQ(fixed.threshold_ns(7), 3 * kS);
    EXPECT_EQ(fixed.threshold_why(7), "--stuck-after");
}

TEST(StuckEpisodes, StuckThenResumedIsOneEpisode)
{
    StuckEpisodes e;
    RecordStuck r{};
    r.type = kRecordStuck;
    r.tgid = r.tid = 7;
    r.ts_ns = 15 * kS;
    r.since_ns = 5 * kS;
    r.threshold_ns = 10 * kS;
    r.sample = 37;
    r.batch = 9;
    strcpy(r.stack, "    stall (job.py:33)\n");
    e.consume(&r, sizeof(r));
    RecordStuck back = r;
    back.resumed = 1;
    back.ts_ns = 23 * kS;
    back.stack[0] = 0;
    e.consume(&back, sizeof(back));
    e.consume(&r, offsetof(RecordStuck, stack)); // cut short: malformed, not read
    ASSERT_EQ(e.episodes().size(), 1u);
    const auto& ep = e.episodes()[0];
    EXPECT_EQ(ep.pid, 7u);
    EXPECT_EQ(ep.since_ns, 5 * kS);
    EXPECT_EQ(ep.end_ns, 23 * kS);
    EXPECT_EQ(ep.sample, 37);
    EXPECT_EQ(ep.stack, "    stall (job.py:33)\n");
}
