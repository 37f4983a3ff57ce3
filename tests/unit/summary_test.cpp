#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <random>

#include "event_builder.h"
#include "export/json.h"
#include "export/report.h"
#include "export/summary.h"
#include "model/native_map.h"
#include "export/timeline.h"

#include <malloc.h>

using namespace lotus;

TEST(Summary, NearestRankPercentiles)
{
    std::vector<uint64_t> v;
    for (uint64_t i = 1; i <= 100; i++)
        v.push_back(i * 1'000'000);
    EXPECT_DOUBLE_EQ(exporter::percentile(v, 0.5), 50'000'000);
    EXPECT_DOUBLE_EQ(exporter::percentile(v, 0.95), 95'000'000);
    EXPECT_DOUBLE_EQ(exporter::percentile(v, 0.99), 99'000'000);
    EXPECT_DOUBLE_EQ(exporter::percentile({}, 0.5), 0);
    auto s = exporter::stats_of({3'000'000, 1'000'000, 2'000'000});
    EXPECT_EQ(s.count, 3u);
    EXPECT_DOUBLE_EQ(s.mean_ms, 2.0);
    EXPECT_DOUBLE_EQ(s.p50_ms, 2.0);
    EXPECT_DOUBLE_EQ(s.total_ms, 6.0);
}

TEST(Summary, RowsPerOpInFirstSeenOrderThenSample)
{
    exporter::Summary sum;
    model::Span a;
    a.name = "B";
    a.start_ns = 0;
    a.end_ns = 2'000'000;
    sum.add(a);
    a.name = "A";
    sum.add(a);
    a.name = "B";
    a.end_ns = 4'000'000;
    sum.add(a);
    a.kind = model::SpanKind::Sample;
    a.name = "sample";
    sum.add(a);
    auto rows = sum.rows();
    ASSERT_EQ(rows.size(), 3u);
    EXPECT_EQ(rows[0].name, "B");
    EXPECT_EQ(rows[0].stats.count, 2u);
    EXPECT_DOUBLE_EQ(rows[0].stats.mean_ms, 3.0);
    EXPECT_EQ(rows[1].name, "A");
    EXPECT_EQ(rows[2].name, "sample");
}

// The pass in flight at attach (DataLoader -1) found to be DataLoader 1's: one group, in the first-seen place of
// either, with both groups' calls; the other DataLoader's group untouched.
TEST(Summary, AGroupMergedIntoAnotherIsOneGroupAtTheEarlierPlace)
{
    exporter::Summary sum;
    auto op = [&](int loader, const char* name, uint64_t ms) {
        model::Span s = model::Span::make(model::SpanKind::Op, name, 7, 7, 0, ms * 1'000'000);
        s.owner = 7;
        s.loader = loader;
        sum.add(s);
    };
    op(-1, "Crop", 2);  // the pass in flight, seen first
    op(-1, "Flip", 1);
    op(0, "Resize", 5); // another DataLoader
    op(1, "Crop", 4);
    op(1, "Norm", 3);
    sum.merge_group({7, -1}, {7, 1});
    auto groups = sum.groups();
    ASSERT_EQ(groups.size(), 2u);
    EXPECT_EQ(groups[0].first.loader, 1) << "at the pass's place (it came first)";
    EXPECT_EQ(groups[1].first.loader, 0);
    std::map<std::string, uint64_t> counts;
    for (const auto& r : groups[0].second)
        counts[r.name] = r.stats.count;
    EXPECT_EQ(counts, (std::map<std::string, uint64_t>{{"Crop", 2}, {"Flip", 1}, {"Norm", 1}}));
    for (const auto& r : groups[0].second)
        if (r.name == "Crop")
            EXPECT_DOUBLE_EQ(r.stats.total_ms, 6.0);
    EXPECT_EQ(groups[1].second.size(), 1u);
    EXPECT_EQ(sum.rows().size(), 4u) << "the all-DataLoaders rows were not changed";
}

// Rows are told apart by their part, never by their names: a --span function named "collate" or "sample", or an
// op class named "loader", is an op row of its own, named so that it does not read as the part.
TEST(Summary, OpsNamedLikeThePartsStayOps)
{
    exporter::Summary sum;
    auto add = [&](model::SpanKind k, const char* name, uint64_t ms) {
        sum.add(model::Span::make(k, name, 7, 7, 0, ms * 1'000'000));
    };
    add(model::SpanKind::Py, "collate", 5);
    add(model::SpanKind::Op, "loader", 3);
    add(model::SpanKind::Py, "sample", 2);
    add(model::SpanKind::Collate, "collate", 1);
    add(model::SpanKind::Loader, "loader", 4);
    add(model::SpanKind::Sample, "sample", 6);
    auto rows = sum.rows();
    ASSERT_EQ(rows.size(), 6u);
    std::vector<std::pair<exporter::Part, std::string>> got;
    for (const auto& r : rows)
        got.emplace_back(r.part, r.name);
    using P = exporter::Part;
    EXPECT_EQ(got, (std::vector<std::pair<P, std::string>>{{P::Op, "collate (op)"},
                                                           {P::Op, "loader (op)"},
                                                           {P::Op, "sample (op)"},
                                                           {P::Loader, "loader"},
                                                           {P::Collate, "collate"},
                                                           {P::Sample, "sample"}}));
    EXPECT_DOUBLE_EQ(rows[3].stats.total_ms, 4.0); // the loading's own, not the op's
    EXPECT_DOUBLE_EQ(rows[4].stats.total_ms, 1.0);
    EXPECT_DOUBLE_EQ(rows[5].stats.total_ms, 6.0);
    EXPECT_EQ(rows[5].label(), "sample (whole pipeline)");
    EXPECT_EQ(rows[2].label(), "sample (op)");
}

// The summary's inner loop takes a row's name without a copy where it is the span's own, else the row's name
// (an op named like a part, an op of a container) made in the scratch string.
TEST(Summary, RowNameWithoutACopyIsTheRowName)
{
    struct Case {
        const char *name, *container, *row;
    };
    for (const Case& c : {Case{"RandomResizedCrop", "", "RandomResizedCrop"}, Case{"waiting", "", "waiting"},
                          Case{"wait", "", "wait (op)"}, Case{"outside any span", "", "outside any span (op)"},
                          Case{"ColorJitter", "RandomApply", "ColorJitter (in RandomApply)"},
                          Case{"sample", "RandomApply", "sample (in RandomApply)"}}) {
        auto s = model::Span::make(model::SpanKind::Op, c.name, 7, 7, 0, 1);
        s.container = c.container;
        std::string scratch;
        const std::string& got = exporter::row_name(s, scratch);
        EXPECT_EQ(got, c.row) << c.name << " in " << c.container;
        EXPECT_EQ(got, exporter::row_name(s)) << c.name << " in " << c.container;
        EXPECT_EQ(&got == &s.name, got == s.name) << c.name << " in " << c.container; // no copy where it is its name
    }
}

TEST(NativeMap, SpansNamedLikeThePartsAreOps)
{
    model::NativeMap map;
    map.sample(7, 10, "f", "lib.so", true, false);
    map.sample(7, 30, "g", "lib.so", true, false);
    map.span(model::Span::make(model::SpanKind::Py, "wait", 7, 7, 0, 20));
    map.span(model::Span::make(model::SpanKind::Wait, "wait", 7, 7, 25, 40));
    map.finish();
    auto t = map.table();
    ASSERT_EQ(t.size(), 2u);
    for (const auto& row : t)
        EXPECT_EQ(row.claim, row.op == "wait" ? model::Claim::Wait : model::Claim::Op) << row.op;
    EXPECT_TRUE(t[0].op == "wait (op)" || t[1].op == "wait (op)");
}

TEST(Summary, SaysWhenNoPipelineWasSeen)
{
    exporter::Summary sum;
    exporter::DataLoaderReport batches;
    std::map<uint32_t, model::ProcessInfo> processes;
    char buf[4096] = {};
    FILE* f = fmemopen(buf, sizeof(buf), "w");
    exporter::print_report(f, exporter::build_report({sum, batches, processes, {}, {}}));
    fclose(f);
    EXPECT_NE(std::string(buf).find("No pipeline was seen"), std::string::npos);
}

// The advice under a verdict, from the numbers: the dominant part of per-sample time, whether more workers would
// help (their busy share against the CPUs the job may use), and a pipeline mostly off-CPU.
struct Advice : test::JobFixture {

    // A training loop that waited `wait_ms` of every 10 ms; workers busy `busy_pct` % of their time; per sample
    // a loader of `loader_ms`, a crop of `crop_ms` and a flip of 0.1 ms, on a CPU `on_cpu_pct` % of the time;
    // per batch of 10 samples a collation of `collate_ms`.
    void job(uint64_t wait_ms, double busy_pct, double loader_ms, double crop_ms, double on_cpu_pct = 95,
             bool files = true, double collate_ms = 0)
    {
        processes[P].root = true;
        test::add_workers(processes, P, {W0, W1}, 10, static_cast<uint64_t>(busy_pct * 1e7));
        uint64_t t = 0;
        for (int i = 0; i < 10; i++, t += 10'000'000) {
            tracker.next_started(P, P, t, 0x70, false);
            tracker.next_finished(P, P, t, t + wait_ms * 1'000'000, false);
        }
        auto add = [&](model::SpanKind k, const char* name, double ms) {
            model::Span s = model::Span::make(k, name, W0, W0, 0, static_cast<uint64_t>(ms * 1e6));
            if (k == model::SpanKind::Loader && files)
                s.args.emplace_back("path", std::string("/data/x.jpg"));
            s.owner = P;
            s.loader = 0;
            s.has_counters = true;
            s.counters.cpu_ns = static_cast<uint64_t>(ms * 1e6 * on_cpu_pct / 100);
            summary.add(s);
        };
        for (int i = 0; i < 100; i++) {
            add(model::SpanKind::Loader, "loader", loader_ms);
            add(model::SpanKind::Op, "RandomResizedCrop", crop_ms);
            add(model::SpanKind::Op, "RandomHorizontalFlip", 0.1);
            add(model::SpanKind::Sample, "sample", crop_ms + 0.1);
            if (collate_ms > 0 && i % 10 == 9)
                add(model::SpanKind::Collate, "collate", collate_ms);
        }
    }
    // One more call of an op, in a worker, for the sample numbered sample_id.
    void op_call(const char* name, double ms, uint32_t pid, uint64_t sample_id)
    {
        model::Span s = model::Span::make(model::SpanKind::Op, name, pid, pid, 0, static_cast<uint64_t>(ms * 1e6));
        s.owner = P;
        s.loader = 0;
        s.sample_id = sample_id;
        summary.add(s);
    }
    std::vector<std::string> advice(double cpus)
    {
        auto report = exporter::summarize_batches(tracker, processes, summary, cpus);
        EXPECT_EQ(report.loops.size(), 1u);
        return report.loops.empty() ? std::vector<std::string>{} : report.loops[0].advice;
    }
    static bool has(const std::vector<std::string>& v, const std::string& part)
    {
        return std::any_of(v.begin(), v.end(), [&](const std::string& s) { return s.find(part) != std::string::npos; });
    }
};

TEST_F(Advice, InputBoundBusyWorkersAndSpareCpus)
{
    job(6, 95, 1.0, 3.0);
    auto a = advice(8);
    // (no worker batches reached the summary: no model of the workers, so no advice on their number; the model
    // is tested in worker_model_test.cpp)
    ASSERT_EQ(a.size(), 1u) << ::testing::PrintToString(a);
    // per sample: loader 1 + crop 3 + flip 0.1 = 4.1 ms, the crop 3 of it (73 %)
    EXPECT_TRUE(has(a, "RandomResizedCrop takes the most time per sample: 3.00 ms of 4.10 ms (73 %"));
    EXPECT_FALSE(summarize_batches(tracker, processes, summary, 8).loops[0].estimate);
    EXPECT_TRUE(has(advice(0), "which this record does not say"));
}

TEST_F(Advice, DecodingDominatesIdleWorkersAndOffCpu)
{
    job(6, 40, 6.0, 1.0, 50);
    auto a = advice(8);
    EXPECT_TRUE(has(a, "Loading (reading and decoding each file) takes the most time per sample: 6.00 ms of 7.10 ms "
                       "(85 %). Decoding dominates"));
    EXPECT_TRUE(has(a, "busy only 40 %")) << ::testing::PrintToString(a);
    EXPECT_TRUE(has(a, "ran on a CPU only 50 % of its wall time"));
}

// Collation is a part of per-sample time like the others: where it is the largest, no other part is said to be.
TEST_F(Advice, CollationThatDominatesIsNamed)
{
    job(6, 95, 1.0, 3.0, 95, true, 50.0);
    auto a = advice(8);
    // per sample: loader 1 + crop 3 + flip 0.1 + collate 50 / 10 = 9.1 ms, the collation 5 of it (55 %)
    EXPECT_TRUE(has(a, "Collation (each batch's collate_fn: from its last sample's end to the batch's end) takes the "
                       "most time per sample: 5.00 ms of 9.10 ms (55 %")) << ::testing::PrintToString(a);
    EXPECT_FALSE(has(a, "RandomResizedCrop takes the most time"));
}

TEST_F(Advice, CollationSmallerThanAnOpCountsInTheShare)
{
    job(6, 95, 1.0, 3.0, 95, true, 10.0);
    // per sample: 1 + 3 + 0.1 + 1 = 5.1 ms, the crop 3 of it
    EXPECT_TRUE(has(advice(8), "RandomResizedCrop takes the most time per sample: 3.00 ms of 5.10 ms (59 %"));
}

// A part whose time is mostly a few very long calls (a pause inside them: the interpreter's garbage collection,
// a first call's set-up) is named with them, so that its usual cost is not taken for what to make cheaper.
TEST_F(Advice, AFewLongCallsThatAreMostOfAPartAreSaid)
{
    job(6, 95, 1.0, 0.5);
    op_call("RandomResizedCrop", 400, W1, 41);
    op_call("RandomResizedCrop", 500, W0, 77);
    auto a = advice(8);
    // the crop: 100 x 0.5 + 900 = 950 ms of 1060 ms over 100 samples; its two long calls 900 of the 950 ms
    EXPECT_TRUE(has(a, "RandomResizedCrop takes the most time per sample: 9.50 ms of 10.60 ms (90 %; loading and "
                       "collation included). 2 of its 102 calls took 95 % of that (400 ms and 500 ms; its other calls "
                       "0.50 ms on average): not its usual cost; look at them in the trace first (the longest: "
                       "sample_id 77 in PID " + std::to_string(W0) + ")."))
        << ::testing::PrintToString(a);
    EXPECT_FALSE(has(a, "the op to make cheaper first"));
}

TEST_F(Advice, LongCallsThatAreNotMostOfAPartAreNotSingledOut)
{
    job(6, 95, 1.0, 3.0);
    for (int i = 0; i < 900; i++)
        op_call("RandomResizedCrop", 3.0, W0, 200 + i);
    op_call("RandomResizedCrop", 400, W0, 5); // over 100 times the others, but 400 of its 3400 ms
    auto a = advice(8);
    EXPECT_TRUE(has(a, "RandomResizedCrop takes the most time per sample: 34.00 ms of 35.10 ms (97 %; loading and "
                       "collation included): the op to make cheaper first.")) << ::testing::PrintToString(a);
    EXPECT_FALSE(has(a, "not its usual cost"));
}

// As many long calls as the summary keeps (kLongest) could be more: none is singled out then.
TEST_F(Advice, TooManyLongCallsToCountAreNotSingledOut)
{
    job(6, 95, 1.0, 0.5);
    for (size_t i = 0; i < exporter::Summary::kLongest; i++)
        op_call("RandomResizedCrop", 400, W0, 100 + i);
    auto a = advice(8);
    EXPECT_TRUE(has(a, "the op to make cheaper first")) << ::testing::PrintToString(a);
    EXPECT_FALSE(has(a, "not its usual cost"));
}

TEST_F(Advice, LoadingWithoutFilesIsNotCalledDecoding)
{
    job(6, 95, 6.0, 1.0, 95, false);
    auto a = advice(8);
    EXPECT_TRUE(has(a, "Loading (the dataset's own work before the pipeline) takes the most time")) << ::testing::PrintToString(a);
    EXPECT_FALSE(has(a, "decod"));
}

// A --span function named "collate" that takes the most time is named as what it is, not as the collation.
TEST_F(Advice, AFunctionNamedLikeAPartIsNotThatPart)
{
    job(6, 95, 1.0, 0.5);
    for (int i = 0; i < 100; i++) {
        model::Span s = model::Span::make(model::SpanKind::Py, "collate", W0, W0, 0, 2'000'000);
        s.owner = P;
        s.loader = 0;
        summary.add(s);
    }
    auto a = advice(8);
    EXPECT_TRUE(has(a, "collate (op) takes the most time per sample: 2.00 ms of 3.60 ms")) << ::testing::PrintToString(a);
    EXPECT_FALSE(has(a, "Collation"));
}

TEST_F(Advice, NotInputBoundSaysNothingOfWorkers)
{
    job(1, 95, 1.0, 3.0);
    auto a = advice(8);
    EXPECT_TRUE(has(a, "RandomResizedCrop takes the most time"));
    EXPECT_FALSE(has(a, "workers"));
}

TEST(Summary, ProseIsWrappedWithItsIndent)
{
    char buf[512] = {};
    FILE* f = fmemopen(buf, sizeof(buf), "w");
    exporter::print_wrapped(f, "  - aaa bbb ccc ddd", 4, 12);
    exporter::print_wrapped(f, "short", 2, 12);
    fclose(f);
    EXPECT_EQ(std::string(buf), "  - aaa bbb\n    ccc ddd\nshort\n");
}

TEST(DurationSeries, ExactUpToItsLimitThenWithinOnePercentInBoundedMemory)
{
    exporter::DurationSeries d;
    std::vector<uint64_t> all;
    uint64_t x = 12345;
    for (size_t i = 0; i < exporter::DurationSeries::kExactLimit; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t v = 1000 + (x >> 40) % 5'000'000; // 1 us .. 5 ms
        d.add(v);
        all.push_back(v);
    }
    std::sort(all.begin(), all.end());
    EXPECT_TRUE(d.exact());
    EXPECT_EQ(d.percentile(0.5), exporter::percentile(all, 0.5));
    EXPECT_EQ(d.percentile(0.99), exporter::percentile(all, 0.99));
    for (int i = 0; i < 3; i++) { // three times as many again, from the same distribution
        for (size_t j = 0; j < exporter::DurationSeries::kExactLimit; j++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            uint64_t v = 1000 + (x >> 40) % 5'000'000;
            d.add(v);
            all.push_back(v);
        }
    }
    std::sort(all.begin(), all.end());
    EXPECT_FALSE(d.exact());
    EXPECT_EQ(d.count(), all.size());
    EXPECT_EQ(d.min_ns(), all.front());
    EXPECT_EQ(d.max_ns(), all.back());
    for (double q : {0.25, 0.5, 0.95, 0.99}) {
        double want = exporter::percentile(all, q), got = d.percentile(q);
        EXPECT_LE(std::abs(got - want), want * common::QuantileSketch::kRelativeError) << q;
    }
    auto s = exporter::stats_of(d);
    double mean = 0;
    for (auto v : all)
        mean += double(v);
    mean /= double(all.size());
    EXPECT_NEAR(s.mean_ms, mean / 1e6, 1e-9);
}

// The sinks of a long run keep memory bounded by the job's shape: hours of samples, batches and waits (two new
// worker processes every epoch) through the summary, the batch statistics and the timeline cost nothing more once
// their sketches have filled. (Before: every duration kept, about 100 B a sample.)
TEST(Summary, MemoryFlatOverALongRun)
{
    using model::Span;
    using model::SpanKind;
    exporter::Summary summary;
    exporter::Timeline timeline(0);
    model::BatchStats stats;
    const char* ops[] = {"RandomResizedCrop", "RandomHorizontalFlip", "ToTensor", "Normalize"};
    uint64_t x = 59, t = 0, sample_id = 0;
    auto draw = [&](uint64_t lo, uint64_t spread) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        return lo + (x >> 33) % spread;
    };
    auto epochs = [&](int from, int to) {
        for (int epoch = from; epoch < to; epoch++) {
            for (int batch = 0; batch < 16; batch++) {
                uint32_t worker = 1000 + 2 * static_cast<uint32_t>(epoch) + static_cast<uint32_t>(batch % 2);
                uint64_t batch_start = t;
                for (int k = 0; k < 32; k++) {
                    uint64_t start = t;
                    for (const char* op : ops) {
                        Span s = Span::make(SpanKind::Op, op, worker, worker, t, t + draw(50'000, 2'000'000));
                        s.owner = 1, s.loader = 0, s.sample_id = ++sample_id;
                        t = s.end_ns;
                        summary.add(s);
                    }
                    Span l = Span::make(SpanKind::Loader, "loader", worker, worker, start, start + draw(100'000, 900'000));
                    l.owner = 1, l.loader = 0;
                    summary.add(l);
                    Span smp = Span::make(SpanKind::Sample, "sample", worker, worker, start, t);
                    smp.owner = 1, smp.loader = 0;
                    summary.add(smp);
                    timeline.add(smp);
                }
                Span b = Span::make(SpanKind::Batch, "batch", worker, worker, batch_start, t);
                b.owner = 1, b.loader = 0;
                timeline.add(b);
                stats.prepare_ns.add(t - batch_start);
                Span w = Span::make(SpanKind::Wait, "wait", 1, 1, t, t + draw(0, 5'000'000));
                timeline.add(w);
                stats.add_wait(w.end_ns - w.start_ns);
                stats.add_delay(draw(0, 1'000'000), draw(0, 10) == 0);
            }
        }
    };
    epochs(0, 100); // warm-up: 51,200 samples, past every sketch's exact values
    size_t before = mallinfo2().uordblks;
    epochs(100, 1100); // 512,000 samples more, 2,000 more worker processes
    size_t after = mallinfo2().uordblks;
    // The timeline keeps a row per process (each a few bins); everything else stays as it was.
    EXPECT_LT(after - std::min(after, before), 2000 * 4 * 64 + 64 * 1024) << before << " -> " << after;
    EXPECT_EQ(stats.wait_ns.count(), 1100u * 16);
    EXPECT_EQ(summary.rows().back().stats.count, 1100u * 16 * 32);
}

// The summary JSON's numbers are what a parser reads from fmt's fixed decimals, written without trailing zeros.
TEST(SummaryJson, NumbersReadAsTheirFixedDecimalsDid)
{
    using exporter::json_dump, exporter::json_fixed, exporter::json_general;
    EXPECT_EQ(json_dump(json_fixed(2.5, 4)), "2.5");
    EXPECT_EQ(json_dump(json_fixed(0, 4)), "0.0");
    EXPECT_EQ(json_dump(json_fixed(80.0, 2)), "80.0");
    EXPECT_EQ(json_dump(json_fixed(1.23456, 4)), "1.2346");
    EXPECT_EQ(json_dump(json_fixed(-0.00001, 4)), "-0.0"); // fmt's "-0.0000"
    EXPECT_EQ(json_dump(json_fixed(499.6, 0)), "500");     // no decimals: an integer, as "{:.0f}" was
    EXPECT_TRUE(json_fixed(499.6, 0).is_number_integer());
    EXPECT_EQ(json_dump(json_fixed(std::nan(""), 4)), "null"); // fmt's "nan" and "inf" were not JSON
    EXPECT_EQ(json_dump(json_fixed(-INFINITY, 2)), "null");
    EXPECT_EQ(json_dump(json_general(2.0)), "2");
    EXPECT_EQ(json_dump(json_general(1.5)), "1.5");
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<double> mag(-8, 8);
    for (int i = 0; i < 20000; i++) {
        double x = std::pow(10.0, mag(rng)) * (i % 3 ? 1 : -1);
        if (i % 5 == 0)
            x = std::round(x * 1e4) / 1e4 + 0.00005; // at the rounding's halfway points, near enough
        for (int d : {2, 3, 4, 6}) {
            auto then = nlohmann::json::parse(fmt::format("{:.{}f}", x, d)).get<double>();
            auto now = nlohmann::json::parse(json_dump(json_fixed(x, d))).get<double>();
            ASSERT_EQ(std::signbit(then), std::signbit(now)) << x;
            ASSERT_EQ(then, now) << fmt::format("{} with {} decimals", x, d);
        }
    }
}

// Strings read as json_string() wrote them: escapes, UTF-8 passed through, a stray byte U+FFFD.
TEST(SummaryJson, StringsReadAsJsonStringWroteThem)
{
    for (std::string s : {std::string("plain"), std::string("q\"b\\s\n\t\r\x01\x08\x0c\x7f"), std::string("caf\xc3\xa9 \xe2\x82\xac"),
                          std::string("bad \xff\xc3 \xed\xa0\x80 end"), std::string("nul\0in", 6)}) {
        std::string now = exporter::json_dump(exporter::json_text(s));
        EXPECT_EQ(nlohmann::json::parse(now), nlohmann::json::parse(exporter::json_string(s))) << now;
    }
}

TEST(SummaryJson, KeysInTheirOrderAndTheRunsAlphabetical)
{
    exporter::Summary sum;
    model::Span a;
    a.pid = 7;
    a.name = "B";
    a.start_ns = 1'000'000;
    a.end_ns = 3'500'000;
    sum.add(a);
    a.kind = model::SpanKind::Sample;
    a.name = "sample";
    sum.add(a);
    a.start_ns = 4'000'000, a.end_ns = 6'000'000;
    sum.add(a);
    std::map<uint32_t, model::ProcessInfo> procs;
    procs[7].pid = 7;
    procs[7].root = procs[7].consumer = true;
    exporter::RunInfo run;
    run.tool = "lotus-bpf test";
    run.limits.emplace();
    run.limits->cpus = 1.5;
    run.native_map_json = "[{\"op\":\"x\",\"samples\":3}]";
    run.process_ends.push_back({9, "worker 0", "killed", 9, -1, 0.25});
    exporter::DataLoaderReport batches;
    exporter::UsageRow job;
    job.role = "job";
    auto report = exporter::build_report({sum, batches, procs, run, {}, {job}, 100});
    std::string text = exporter::report_json(report);
    ASSERT_EQ(text.back(), '\n');
    auto doc = nlohmann::ordered_json::parse(text);
    std::vector<std::string> keys;
    for (const auto& [k, v] : doc.items())
        keys.push_back(k);
    EXPECT_EQ(keys, (std::vector<std::string>{"run", "ops", "batches", "loaders", "training", "processes", "counters",
                                              "native_map", "resources", "worker_memory", "throughput", "ranks",
                                              "straggler", "waits", "input_bound_thresholds", "slow_samples", "stuck"}));
    std::vector<std::string> run_keys;
    for (const auto& [k, v] : doc["run"].items())
        run_keys.push_back(k);
    EXPECT_TRUE(std::is_sorted(run_keys.begin(), run_keys.end()));
    EXPECT_EQ(doc["run"]["native_map"], nlohmann::ordered_json::parse(run.native_map_json));
    EXPECT_EQ(doc["run"]["limits"]["cpus"], 1.5);
    EXPECT_EQ(doc["run"]["limits"]["memory_bytes"], nullptr);
    EXPECT_EQ(doc["run"]["process_ends"][0]["at_s"], 0.25);
    EXPECT_EQ(doc["run"]["tool"], "lotus-bpf test");
    // The trace's otherData: the same members, without the braces.
    EXPECT_EQ(nlohmann::ordered_json::parse("{" + exporter::run_json_members(run) + "}"), doc["run"]);
    std::vector<std::string> stat_keys;
    for (const auto& [k, v] : doc["ops"]["B"].items())
        stat_keys.push_back(k);
    EXPECT_EQ(stat_keys, (std::vector<std::string>{"count", "mean_ms", "std_ms", "min_ms", "p25_ms", "p50_ms", "p75_ms",
                                                   "p95_ms", "p99_ms", "max_ms", "total_ms"}));
    EXPECT_EQ(doc["ops"]["B"]["count"], 1);
    EXPECT_EQ(doc["ops"]["B"]["mean_ms"], 2.5);
    EXPECT_EQ(doc["batches"], nullptr);
    EXPECT_EQ(doc["processes"][0]["pid"], 7);
    EXPECT_EQ(doc["processes"][0]["busy_pct"], 0.0);
    EXPECT_EQ(doc["counters"].dump(), R"({"names":[],"ops":{}})");
    EXPECT_EQ(doc["native_map"].dump(), "[]");
    EXPECT_EQ(doc["resources"]["interval_ms"], 100);
    EXPECT_EQ(doc["resources"]["job"]["processes"], 0);
    EXPECT_EQ(doc["throughput"]["samples"], 2);
    EXPECT_EQ(doc["throughput"]["seconds"], 0.005); // first sample's start to the last one's end
    EXPECT_EQ(doc["throughput"]["samples_per_s"], 400.0);
    // No resources: null.
    report.usage.clear();
    EXPECT_EQ(nlohmann::ordered_json::parse(exporter::report_json(report))["resources"], nullptr);
}

TEST(Straggler, TheRankWhoseWaitStandsOutIsNamedAndTheTextSaysWhatToTry)
{
    auto row = [](int rank, double wait, const char* node) {
        exporter::RankRow r;
        r.rank = rank;
        r.label = "rank " + std::to_string(rank);
        r.node = node;
        r.batches = 10;
        r.wait_share = wait;
        return r;
    };
    auto s = exporter::find_straggler({row(0, 0.03, "n0"), row(1, 0.05, "n0"), row(2, 0.62, "n1"), row(3, 0.04, "n1")});
    ASSERT_TRUE(s);
    EXPECT_EQ(s->rank.rank, 2);
    EXPECT_DOUBLE_EQ(s->others_wait_share, 0.04);
    EXPECT_NE(s->text.find("rank 2 on n1 waited for data 62 %"), std::string::npos) << s->text;
    // Close shares, or one rank alone: none.
    EXPECT_FALSE(exporter::find_straggler({row(0, 0.30, "n0"), row(1, 0.22, "n0")}));
    EXPECT_FALSE(exporter::find_straggler({row(0, 0.15, "n0"), row(1, 0.09, "n0")})); // not 10 points apart
    EXPECT_FALSE(exporter::find_straggler({row(0, 0.9, "n0")}));
    // A rank that consumed no batch is not compared.
    auto idle = row(1, 0.0, "n0");
    idle.batches = 0;
    EXPECT_FALSE(exporter::find_straggler({row(0, 0.5, "n0"), idle}));
}

// A class name the job chose to hold a terminal escape (an OSC that retitles the window, a carriage return): the
// printed summary quotes it escaped, in its row and in the advice that names it; the JSON keeps it exact.
TEST_F(Advice, NamesTheJobChoseArePrintedEscapedAndKeptExactInTheJson)
{
    const std::string evil = "\x1b]0;x\x07" "Evil\r";
    job(6, 95, 1.0, 3.0);
    for (uint64_t i = 0; i < 100; i++)
        op_call(evil.c_str(), 5.0, W0, i);
    auto batches = exporter::summarize_batches(tracker, processes, summary, 8);
    ASSERT_EQ(batches.loops.size(), 1u);
    ASSERT_TRUE(has(batches.loops[0].advice, evil + " takes the most time")); // the model keeps the name as it is
    auto report = exporter::build_report({summary, batches, processes, {}, {}});
    char* buf = nullptr;
    size_t len = 0;
    FILE* f = open_memstream(&buf, &len);
    exporter::print_report(f, report);
    fclose(f);
    std::string text(buf, len);
    free(buf);
    for (char c : {'\x1b', '\x07', '\r'})
        EXPECT_EQ(text.find(c), std::string::npos) << static_cast<int>(c) << "\n" << text;
    EXPECT_NE(text.find("\\e]0;x\\aEvil\\r "), std::string::npos) << text;                 // its row
    EXPECT_NE(text.find("\\e]0;x\\aEvil\\r takes the most time"), std::string::npos) << text; // the advice
    auto doc = nlohmann::json::parse(exporter::report_json(report));
    EXPECT_TRUE(doc["ops"].contains(evil)) << doc["ops"].dump();
}
