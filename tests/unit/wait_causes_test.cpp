// The training loop's waits split into causes (model/wait_causes.h), from spans as the engine emits them.
#include <gtest/gtest.h>

#include <random>

#include "model/wait_causes.h"

using namespace lotus::model;

namespace {

constexpr uint32_t kLoop = 100, kWorker0 = 200, kWorker1 = 201;
constexpr uint64_t kMs = 1'000'000;

class WaitCausesTest : public ::testing::Test {
protected:
    WaitCauses causes;
    uint64_t next_sample = 1, next_flow = 1;
    int64_t cpu_ms = -1; // each sample's pipeline time on a CPU; -1: not counted

    Span tagged(SpanKind k, const char* name, uint32_t pid, uint64_t start, uint64_t end)
    {
        Span s = Span::make(k, name, pid, pid, start, end);
        s.owner = kLoop;
        s.loader = 0;
        return s;
    }
    // One sample: loading `load` ms from `at`, then its ops one after another; returns its end.
    uint64_t sample(uint32_t pid, uint64_t at, int64_t index, uint64_t load,
                    std::vector<std::pair<const char*, uint64_t>> ops, const char* path = "")
    {
        uint64_t id = next_sample++;
        uint64_t t = at + load * kMs, start = t;
        for (auto [name, ms] : ops) {
            Span op = tagged(SpanKind::Op, name, pid, t, t + ms * kMs);
            op.sample_id = id;
            op.sample = index;
            causes.see(op);
            t += ms * kMs;
        }
        Span s = tagged(SpanKind::Sample, "sample", pid, start, t);
        if (cpu_ms >= 0) {
            s.has_counters = true;
            s.counters.cpu_ns = static_cast<uint64_t>(cpu_ms) * kMs;
        }
        s.sample_id = id;
        s.sample = index;
        causes.see(s);
        pending_loaders.push_back({id, index, at, start, path});
        return t;
    }
    struct PendingLoader {
        uint64_t id;
        int64_t index;
        uint64_t start, end;
        std::string path;
    };
    std::vector<PendingLoader> pending_loaders;
    // A batch of `n` ordinary samples (load 2 ms, ops A 3 ms and B 5 ms) by `pid` from `at`; `slow`: sample i loads
    // slow_ms instead. Its loaders, collation and batch span go out as the engine sends them; returns its flow id.
    uint64_t batch(uint32_t pid, int worker, int64_t idx, int64_t epoch, uint64_t at, uint64_t* end_out, int n = 4,
                   int slow = -1, uint64_t slow_ms = 0, uint64_t a_ms = 3)
    {
        uint64_t t = at;
        for (int i = 0; i < n; i++)
            t = sample(pid, t, idx * n + i, i == slow ? slow_ms : 2, {{"A", a_ms}, {"B", 5}},
                       i == slow ? "/data/big.jpg" : "/data/x.jpg");
        for (const auto& l : pending_loaders) {
            Span s = tagged(SpanKind::Loader, "loader", pid, l.start, l.end);
            s.sample_id = l.id;
            s.sample = l.index;
            s.args.emplace_back("path", l.path);
            causes.see(s);
        }
        pending_loaders.clear();
        Span c = tagged(SpanKind::Collate, "collate", pid, t, t + kMs);
        causes.see(c);
        Span b = tagged(SpanKind::Batch, "batch", pid, at, t + kMs);
        b.args = {{"batch", idx}, {"epoch", epoch}, {"worker", int64_t{worker}}, {"samples", int64_t{n}}};
        b.flow_out = next_flow++;
        causes.see(b);
        *end_out = t + kMs;
        return b.flow_out;
    }
    WaitRow wait(uint64_t start, uint64_t end, int64_t idx, int64_t epoch, uint64_t flow)
    {
        Span w = tagged(SpanKind::Wait, "wait", kLoop, start, end);
        w.args = {{"batch", idx}, {"epoch", epoch}};
        w.flow_in = flow;
        causes.attribute(w);
        last = w;
        auto rows = causes.rows();
        for (const auto& r : rows)
            if (r.start_ns == start && r.batch == idx && r.epoch == epoch)
                return r;
        ADD_FAILURE() << "no row";
        return {};
    }
    Span last;
    static uint64_t part(const WaitRow& r, WaitCause c, const std::string& op = "")
    {
        for (const auto& p : r.parts)
            if (p.cause == c && p.op == op)
                return p.ns;
        return 0;
    }
    static uint64_t sum(const WaitRow& r)
    {
        uint64_t s = 0;
        for (const auto& p : r.parts)
            s += p.ns;
        return s;
    }
    std::string arg(const char* name) const
    {
        for (const auto& [k, v] : last.args)
            if (k == name) {
                if (auto* t = std::get_if<std::string>(&v))
                    return *t;
                if (auto* i = std::get_if<int64_t>(&v))
                    return std::to_string(*i);
            }
        return "";
    }
    // One worker preparing batches one after another from t; the loop asks for each halfway through it.
    uint64_t warm_up(int batches, uint64_t t)
    {
        for (int i = 0; i < batches; i++) {
            uint64_t end;
            uint64_t flow = batch(kWorker0, 0, i, 0, t, &end);
            wait((t + end) / 2, end + kMs, i, 0, flow);
            t = end;
        }
        return t;
    }
};

} // namespace

TEST_F(WaitCausesTest, OneBusyWorkerIsTooFewWorkersAfterItsFirstBatch)
{
    uint64_t end;
    uint64_t flow = batch(kWorker0, 0, 0, 0, 0, &end);
    WaitRow first = wait(kMs, end + kMs, 0, 0, flow);
    // the pass's first batch: no number of workers would have had it sooner
    EXPECT_EQ(part(first, WaitCause::LateStart), end - kMs);
    EXPECT_EQ(part(first, WaitCause::HandOver), kMs);
    uint64_t t = end;
    flow = batch(kWorker0, 0, 1, 0, t, &end);
    WaitRow second = wait(t + 10 * kMs, end + 2 * kMs, 1, 0, flow);
    EXPECT_EQ(part(second, WaitCause::TooFewWorkers), end - (t + 10 * kMs));
    EXPECT_EQ(part(second, WaitCause::HandOver), 2 * kMs);
    EXPECT_EQ(sum(second), second.ns());
    EXPECT_EQ(second.worker_id, 0);
    EXPECT_EQ(second.prepare_ns, end - t);
    EXPECT_FALSE(second.later_ready);
    EXPECT_EQ(arg("cause"), "too few workers");
    EXPECT_EQ(arg("worker"), "0");
}

TEST_F(WaitCausesTest, AnOutlierSampleIsASlowSampleNamedWithItsFile)
{
    uint64_t t = warm_up(8, 0); // 32 ordinary samples of 10 ms
    uint64_t end;
    uint64_t flow = batch(kWorker0, 0, 8, 0, t, &end, 4, 2, 80); // sample 34 loads 80 ms instead of 2
    WaitRow r = wait(t + 5 * kMs, end, 8, 0, flow);
    EXPECT_EQ(part(r, WaitCause::SlowSample), 78 * kMs); // 88 ms against the median 10 ms
    EXPECT_EQ(sum(r), r.ns());
    EXPECT_EQ(r.slowest_sample, 34);
    EXPECT_EQ(r.slowest_path, "/data/big.jpg");
    EXPECT_EQ(r.slowest_part, "loading");
    EXPECT_EQ(part(r, WaitCause::TooFewWorkers), r.ns() - 78 * kMs) << "the rest of the overlap";
    EXPECT_EQ(arg("slowest_sample"), "34");
    EXPECT_EQ(arg("slowest_path"), "/data/big.jpg");
}

TEST_F(WaitCausesTest, ASampleThatOnlyWaitedForACpuIsNoSlowSample)
{
    cpu_ms = 7; // every pipeline on a CPU 7 ms
    uint64_t t = warm_up(8, 0);
    // op A's wall time 80 ms instead of 3, but its time on a CPU as usual: it waited for a CPU
    uint64_t end;
    uint64_t flow = batch(kWorker0, 0, 8, 0, t, &end, 4, -1, 0, 80);
    WaitRow r = wait(t + 5 * kMs, end, 8, 0, flow);
    EXPECT_EQ(part(r, WaitCause::SlowSample), 0u) << "the op's excess is the op's, not a sample's";
    EXPECT_GT(part(r, WaitCause::Op, "A"), 0u);
    EXPECT_EQ(sum(r), r.ns());
}

TEST_F(WaitCausesTest, ABatchSlowerThanTheOnesAfterItIsSplitOverItsParts)
{
    uint64_t t = warm_up(8, 0);
    // worker 1 has batch 9 ready before the loop asks for batch 8, which worker 0 prepares with op A 4 x slower
    uint64_t end1, end0;
    uint64_t flow1 = batch(kWorker1, 1, 9, 0, t, &end1);
    uint64_t flow0 = batch(kWorker0, 0, 8, 0, t, &end0, 4, -1, 0, 12);
    WaitRow r = wait(end1 + kMs, end0, 8, 0, flow0);
    EXPECT_TRUE(r.later_ready);
    EXPECT_EQ(part(r, WaitCause::TooFewWorkers), 0u);
    EXPECT_GT(part(r, WaitCause::Op, "A"), 0u);
    EXPECT_EQ(r.parts[0].cause, WaitCause::Op);
    EXPECT_EQ(r.parts[0].op, "A");
    EXPECT_EQ(sum(r), r.ns());
    WaitRow next = wait(end0, end0 + kMs, 9, 0, flow1);
    EXPECT_EQ(part(next, WaitCause::HandOver), kMs) << "ready before it was asked for";
}

TEST_F(WaitCausesTest, LateStartUnknownAndTotals)
{
    uint64_t t = warm_up(4, 0);
    uint64_t end;
    uint64_t flow = batch(kWorker0, 0, 4, 0, t + 30 * kMs, &end); // began 30 ms after the loop asked
    WaitRow r = wait(t, end, 4, 0, flow);
    EXPECT_EQ(part(r, WaitCause::LateStart), 30 * kMs);
    WaitRow unknown = wait(end, end + 7 * kMs, 5, 0, 999); // its batch never seen
    EXPECT_EQ(part(unknown, WaitCause::Unknown), 7 * kMs);
    EXPECT_EQ(unknown.worker_pid, 0u);
    uint64_t all = 0, waited = 0;
    for (const auto& c : causes.totals({kLoop, 0}))
        all += c.ns;
    for (const auto& row : causes.rows())
        waited += row.ns();
    EXPECT_EQ(all, waited) << "the causes add up to the waiting";
    causes.merge({kLoop, 0}, {kLoop, 3});
    EXPECT_TRUE(causes.totals({kLoop, 0}).empty());
    EXPECT_EQ(causes.totals_of_owner(kLoop).size(), causes.totals({kLoop, 3}).size());
}

TEST_F(WaitCausesTest, PartsAlwaysAddUpToTheWait)
{
    std::mt19937 rng(7);
    uint64_t t = 0;
    for (int i = 0; i < 200; i++) {
        uint64_t end;
        int slow = static_cast<int>(rng() % 8) - 4;
        uint64_t flow = batch(rng() % 2 ? kWorker0 : kWorker1, 0, i, 1, t, &end, 4, slow, 20 + rng() % 200,
                              1 + rng() % 20);
        uint64_t start = t + (rng() % 100) * kMs, stop = std::max(start, end) + (rng() % 5) * kMs;
        WaitRow r = wait(start, stop, i, 1, flow);
        ASSERT_EQ(sum(r), r.ns()) << i;
        t = end - (rng() % 3) * kMs;
    }
}

TEST_F(WaitCausesTest, AnOpSlowForEverySampleOfABatchIsTheOpsNotASlowSamples)
{
    uint64_t t = warm_up(8, 0);
    uint64_t end;
    uint64_t flow = batch(kWorker0, 0, 8, 0, t, &end, 4, -1, 0, 80); // op A 80 ms in each of its 4 samples
    WaitRow r = wait(t + 5 * kMs, end, 8, 0, flow);
    EXPECT_EQ(part(r, WaitCause::SlowSample), 0u);
    EXPECT_EQ(r.parts[0].cause, WaitCause::Op);
    EXPECT_EQ(r.parts[0].op, "A");
    EXPECT_EQ(sum(r), r.ns());
}
