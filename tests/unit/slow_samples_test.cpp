// The slow samples (export/slow_samples.h): thresholds, the size fit, rows per sample across epochs, and their
// renderings.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "export/slow_samples.h"
#include "export/slow_samples_report.h"

using namespace lotus;
using exporter::SampleCounts;
using exporter::SlowSamples;
using model::Span;
using model::SpanKind;

namespace {

constexpr uint32_t P = 10, W = 11;

// A sample as the engine hands it over: its ops and its sample span as its pipeline returns, its loader span
// later (with its batch).
struct Feeder {
    SlowSamples slow;
    uint64_t now = 1'000'000, id = 0;
    std::vector<Span> loaders; // held until flush(), as the engine holds them until the batch's hand-over
    void sample(int64_t index, const std::string& path, int64_t bytes, double loader_ms, double op_ms[2],
                uint32_t owner = P, int loader = 0)
    {
        uint64_t sid = ++id;
        auto span = [&](SpanKind k, const char* name, double ms) {
            Span s = Span::make(k, name, W, W, now, now + static_cast<uint64_t>(ms * 1e6));
            now = s.end_ns;
            s.sample = k == SpanKind::Op ? -1 : index;
            s.sample_id = sid;
            s.owner = owner;
            s.loader = loader;
            return s;
        };
        Span l = span(SpanKind::Loader, "loader", loader_ms);
        if (!path.empty())
            l.args.emplace_back("path", path);
        if (bytes >= 0)
            l.args.emplace_back("bytes", bytes);
        uint64_t start = now;
        Span a = span(SpanKind::Op, "Resize", op_ms[0]);
        Span b = span(SpanKind::Op, "ToTensor", op_ms[1]);
        Span s = Span::make(SpanKind::Sample, "sample", W, W, start, now);
        s.sample = index, s.sample_id = sid, s.owner = owner, s.loader = loader;
        slow.add(a);
        slow.add(b);
        slow.add(s);
        loaders.push_back(l);
    }
    void flush()
    {
        for (const auto& l : loaders)
            slow.add(l);
        loaders.clear();
    }
};

// A little jitter that repeats: i-th sample's share of `spread` ms.
double jitter(int i, double spread) { return spread * static_cast<double>((i * 37) % 11) / 10.0; }

} // namespace

TEST(SlowSamples, LeastSquaresOfALineAndOfNoSpread)
{
    auto f = exporter::least_squares({0, 1, 2, 3}, {1, 3, 5, 7});
    ASSERT_TRUE(f);
    EXPECT_NEAR(f->slope, 2, 1e-12);
    EXPECT_NEAR(f->intercept, 1, 1e-12);
    EXPECT_NEAR(f->r2, 1, 1e-12);
    EXPECT_FALSE(exporter::least_squares({2, 2, 2}, {1, 2, 3})); // x does not vary: no rate
    EXPECT_FALSE(exporter::least_squares({1}, {1}));
}

TEST(SlowSamples, TheThresholdPassesAFewPercentOfOutliersWhereAPercentileWouldNot)
{
    std::vector<float> ms;
    for (int i = 0; i < 392; i++)
        ms.push_back(static_cast<float>(1.0 + jitter(i, 0.2)));
    for (int i = 0; i < 8; i++) // 2 %: the 99th percentile is one of them
        ms.push_back(8.0f);
    double t = exporter::slow_threshold(ms);
    EXPECT_GT(t, 1.2);
    EXPECT_LT(t, 8.0);
    // A tight distribution: twice the median, not its tiny fence.
    EXPECT_DOUBLE_EQ(exporter::slow_threshold(std::vector<float>(50, 1.0f)), 2.0);
}

TEST(SlowSamples, BigFilesAreSlowEveryEpochAndTheirSizeExplainsThem)
{
    Feeder f;
    double ops[2] = {0.2, 0.1};
    constexpr double kFixedMs = 0.3, kMsPerMb = 40;
    for (int epoch = 0; epoch < 2; epoch++) {
        for (int i = 0; i < 200; i++) {
            int64_t bytes = i % 50 == 7 ? 80'000 : 10'000 + (i % 5) * 100;
            double loader = kFixedMs + kMsPerMb * static_cast<double>(bytes) / 1e6 + jitter(i + epoch, 0.05);
            if (i == 101 && epoch == 1)
                loader = 6; // a small file slow once (the machine, not the data)
            if (i == 150)
                loader = 5; // a small file slow every time (a progressive JPEG, say): not its size
            f.sample(i, "/data/img" + std::to_string(i) + ".jpg", bytes, loader, ops);
            if (i % 8 == 7)
                f.flush();
        }
        f.flush();
    }
    auto groups = f.slow.analyze();
    ASSERT_EQ(groups.size(), 1u);
    const auto& g = groups[0];
    EXPECT_EQ(g.owner, P);
    EXPECT_EQ(g.loader, 0);
    EXPECT_EQ(g.samples, 400u);
    EXPECT_EQ(g.with_bytes, 400u);
    EXPECT_EQ(g.slow_times, 11u);
    EXPECT_EQ(g.slow_samples, 6u);
    EXPECT_EQ(g.slow_every_time, 5u);
    ASSERT_EQ(g.rows.size(), 6u);
    const auto& odd = g.rows[0]; // slow both times, and the slowest
    EXPECT_EQ(odd.index, 150);
    EXPECT_EQ(odd.times_slow, 2u);
    EXPECT_NEAR(odd.fastest_loader_ms, 5, 1e-6);
    EXPECT_TRUE(odd.stands_out); // its size does not explain it
    for (size_t r = 1; r < 5; r++) { // then the big files: slow both times
        const auto& row = g.rows[r];
        EXPECT_EQ(row.index % 50, 7) << row.index;
        EXPECT_EQ(row.path, "/data/img" + std::to_string(row.index) + ".jpg");
        EXPECT_EQ(row.bytes, 80'000);
        EXPECT_EQ(row.times_slow, 2u);
        EXPECT_EQ(row.times_seen, 2u);
        EXPECT_TRUE(row.slow_loader);
        EXPECT_FALSE(row.slow_pipeline);
        ASSERT_EQ(row.ops.size(), 2u);
        EXPECT_EQ(row.ops[0].first, "Resize");
        EXPECT_NEAR(row.ops[0].second, 0.2, 1e-6);
        EXPECT_NEAR(row.pipeline_ms, 0.3, 1e-6);
        EXPECT_NEAR(row.ms, row.loader_ms + row.pipeline_ms, 1e-6);
        EXPECT_NEAR(row.expected_loader_ms, row.loader_ms, 0.06);
        EXPECT_FALSE(row.stands_out);
    }
    const auto& once = g.rows[5];
    EXPECT_EQ(once.index, 101);
    EXPECT_EQ(once.times_slow, 1u);
    EXPECT_EQ(once.times_seen, 2u);
    EXPECT_NEAR(once.loader_ms, 6, 1e-6);
    EXPECT_LT(once.fastest_loader_ms, 1);
    EXPECT_FALSE(once.stands_out); // at its fastest its size explains it: the slow time was not the file's
    ASSERT_TRUE(g.fit);
    EXPECT_NEAR(g.fit->ms_per_mb, kMsPerMb, 1.0);
    EXPECT_NEAR(g.fit->fixed_ms, kFixedMs, 0.05);
    EXPECT_GT(g.fit->r2, 0.95);
    EXPECT_EQ(g.fit->stand_out, 1u); // samples, at their fastest: 150
    EXPECT_EQ(g.fit->samples, 199u);
}

TEST(SlowSamples, UnknownSizesNoFitAndSamplesKnownByNeither)
{
    Feeder f;
    double ops[2] = {0.2, 0.1};
    for (int i = 0; i < 40; i++) {
        double big[2] = {5.0, 0.1};
        f.sample(i == 3 ? -1 : i, "", -1, 0.5, i == 3 ? big : ops); // (3: no index read, no file: a slow pipeline)
    }
    f.flush();
    auto g = f.slow.analyze().at(0);
    EXPECT_EQ(g.with_bytes, 0u);
    EXPECT_FALSE(g.fit);
    ASSERT_EQ(g.rows.size(), 1u);
    EXPECT_EQ(g.rows[0].index, -1);
    EXPECT_EQ(g.rows[0].times_seen, 0u); // not counted: nothing tells it is the same sample another time
    EXPECT_TRUE(g.rows[0].slow_pipeline);
    EXPECT_FALSE(g.rows[0].slow_loader);
    EXPECT_EQ(g.rows[0].expected_loader_ms, -1);
}

TEST(SlowSamples, TooFewTimesNoThresholdAndALoaderThatNeverCame)
{
    Feeder f;
    double ops[2] = {0.2, 0.1};
    for (int i = 0; i < 5; i++)
        f.sample(i, "/d/x", 10, 0.5, ops);
    f.loaders.clear(); // (their loading began before tracing: no loader span)
    auto g = f.slow.analyze().at(0);
    EXPECT_EQ(g.samples, 5u); // the pipelines still count, as far as they came
    EXPECT_EQ(g.loader_threshold_ms, -1);
    EXPECT_EQ(g.pipeline_threshold_ms, -1);
    EXPECT_EQ(g.slow_times, 0u);
}

TEST(SlowSamples, AJoinedPassIsItsDataLoadersGroup)
{
    Feeder f;
    double ops[2] = {0.2, 0.1};
    for (int i = 0; i < 30; i++)
        f.sample(i, "/d/" + std::to_string(i), 100, 0.5, ops, P, i < 10 ? -1 : 0);
    f.flush();
    f.slow.merge_group(P, -1, P, 0);
    auto groups = f.slow.analyze();
    ASSERT_EQ(groups.size(), 1u);
    EXPECT_EQ(groups[0].loader, 0);
    EXPECT_EQ(groups[0].samples, 30u);
}

TEST(SlowSamples, TheJsonAndTheText)
{
    Feeder f;
    double ops[2] = {0.2, 0.1};
    for (int i = 0; i < 100; i++)
        f.sample(i, "/data/" + std::to_string(i) + ".jpg", i == 9 ? 90'000 : 10'000 + i, i == 9 ? 4.0 : 0.5 + jitter(i, 0.02),
                 ops);
    f.flush();
    auto groups = f.slow.analyze();
    groups[0].title = "DataLoader 0 of main";
    auto j = exporter::slow_samples_json(groups);
    EXPECT_NE(j["rule"].get<std::string>().find("Q3 + 3 x IQR"), std::string::npos);
    const auto& l = j["loaders"][0];
    EXPECT_EQ(l["owner"], P);
    EXPECT_EQ(l["samples"], 100);
    EXPECT_TRUE(l["threshold"]["loader_ms"].is_number());
    ASSERT_EQ(l["rows"].size(), 1u);
    EXPECT_EQ(l["rows"][0]["index"], 9);
    EXPECT_EQ(l["rows"][0]["path"], "/data/9.jpg");
    EXPECT_EQ(l["rows"][0]["bytes"], 90'000);
    EXPECT_EQ(l["rows"][0]["slow_in"], nlohmann::json::array({"loader"}));
    EXPECT_EQ(l["rows"][0]["times_slow"], 1);
    EXPECT_EQ(l["rows"][0]["times_seen"], 1);
    EXPECT_TRUE(l["rows"][0]["ops"]["ToTensor"].is_number());
    EXPECT_TRUE(l["size_fit"]["ms_per_mb"].is_number());
    EXPECT_TRUE(l["size_fit"]["r2"].is_number());

    char* buf = nullptr;
    size_t len = 0;
    FILE* out = open_memstream(&buf, &len);
    exporter::print_slow_samples(out, groups);
    fclose(out);
    std::string text(buf, len);
    free(buf);
    EXPECT_NE(text.find("slow samples: 1 of 100 sample times were slow, 1 sample(s), 0 of them slow every time"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("/data/9.jpg"), std::string::npos) << text;
    EXPECT_NE(text.find("ms per MB"), std::string::npos) << text;
    EXPECT_NE(exporter::slow_samples_html(groups).find("/data/9.jpg"), std::string::npos);
}

namespace {

// A DataLoader's state at most: the candidates (16 bytes each), the per-sample table's 2^17 slots of 24 bytes,
// and half a megabyte for the histograms and the slowest times' details.
constexpr size_t kStateBound = SlowSamples::kMaxCandidates * 16 + (1u << 17) * 24 + (512u << 10);

// A lean sample for long runs: its loader span (an index, no file) and its sample span, no ops.
void lean_sample(SlowSamples& slow, uint64_t sid, int64_t index, double loader_ms, double pipeline_ms)
{
    uint64_t now = sid * 100'000'000;
    Span s = Span::make(SpanKind::Sample, "sample", W, W, now, now + static_cast<uint64_t>(pipeline_ms * 1e6));
    Span l = Span::make(SpanKind::Loader, "loader", W, W, now, now + static_cast<uint64_t>(loader_ms * 1e6));
    for (Span* x : {&s, &l})
        x->sample = index, x->sample_id = sid, x->owner = P, x->loader = 0;
    slow.add(s);
    slow.add(l);
}

} // namespace

// Four epochs of 16,384 samples (4 x the old cap): files slow only in the last two epochs are found, with their
// times slow and seen, as are files slow every epoch.
TEST(SlowSamples, SlowSamplesLateInALongRunAreFound)
{
    Feeder f;
    double ops[2] = {0.2, 0.1};
    constexpr int kData = 1 << 14;
    int late = 0, always = 0;
    for (int epoch = 0; epoch < 4; epoch++) {
        for (int i = 0; i < kData; i++) {
            bool late_slow = i % 500 == 7 && epoch >= 2, always_slow = i % 1000 == 300;
            late += late_slow && epoch == 2, always += always_slow && epoch == 0;
            f.sample(i, "/data/" + std::to_string(i), 10'000, late_slow || always_slow ? 8.0 : 0.5 + jitter(i, 0.02),
                     ops);
            if (i % 64 == 63)
                f.flush();
        }
    }
    auto g = f.slow.analyze().at(0);
    EXPECT_EQ(g.samples, 4u * kData);
    EXPECT_EQ(g.not_kept, 0u); // every slow time kept
    EXPECT_EQ(g.untracked, 0u);
    EXPECT_FALSE(g.thresholds_exact);
    EXPECT_GT(g.loader_error_ms, 0);
    EXPECT_LT(g.loader_error_ms, 0.07 * g.loader_threshold_ms);
    EXPECT_NEAR(g.loader_threshold_ms, 1.02, 0.03); // (exact: the farther of 2 x 0.51 and Q3 + 3 IQR)
    EXPECT_EQ(g.slow_times, 2u * late + 4u * always);
    EXPECT_EQ(g.slow_samples, static_cast<uint64_t>(late + always));
    EXPECT_EQ(g.slow_every_time, static_cast<uint64_t>(always));
    ASSERT_EQ(g.rows.size(), static_cast<size_t>(late + always));
    for (const auto& r : g.rows) {
        EXPECT_EQ(r.times_seen, 4u);
        EXPECT_EQ(r.times_slow, r.index % 1000 == 300 ? 4u : 2u) << r.index;
        EXPECT_TRUE(r.index % 500 == 7 || r.index % 1000 == 300) << r.index;
    }
    EXPECT_EQ(g.rows.back().times_slow, 2u);
}

// A run whose first times are far slower than the rest (a cold page cache): its early times, let go of under the
// running bound of their time, are slow by the final threshold, and the summary says how many may be missing.
TEST(SlowSamples, TimesLetGoOfThatTurnOutSlowAreCountedNotHidden)
{
    SlowSamples slow;
    constexpr uint64_t kCold = 1 << 14, kWarm = 80'000;
    for (uint64_t i = 0; i < kCold + kWarm; i++)
        lean_sample(slow, i + 1, static_cast<int64_t>(i % 20'000),
                    i < kCold ? 10 + jitter(static_cast<int>(i), 2) : 1 + jitter(static_cast<int>(i), 0.05), 0.3);
    auto g = slow.analyze().at(0);
    EXPECT_NEAR(g.loader_threshold_ms, 2, 0.1);
    EXPECT_GT(g.not_kept, 0u);
    EXPECT_LT(g.slow_times, kCold);
    EXPECT_GE(g.slow_times + g.not_kept, kCold); // an upper bound: every cold time is slow
    EXPECT_LE(g.slow_times + g.not_kept, kCold + kCold / 20);
    char* buf = nullptr;
    size_t len = 0;
    FILE* out = open_memstream(&buf, &len);
    exporter::print_slow_samples(out, {g});
    fclose(out);
    std::string text(buf, len);
    free(buf);
    EXPECT_NE(text.find("more slow time(s) not counted"), std::string::npos) << text;
    EXPECT_NE(text.find("thresholds from histograms"), std::string::npos) << text;
    auto j = exporter::slow_samples_json({g})["loaders"][0];
    EXPECT_EQ(j["not_analysed"], g.not_kept);
    EXPECT_EQ(j["threshold"]["exact"], false);
}

// A million times of a million distinct samples, one in 50 slow: the state stays bounded (the per-sample table
// full, the candidates capped), and every slow time is still found.
TEST(SlowSamples, AMillionTimesInBoundedMemory)
{
    SlowSamples slow;
    constexpr uint64_t kTimes = 1'000'000;
    size_t at_half = 0;
    for (uint64_t i = 0; i < kTimes; i++) {
        lean_sample(slow, i + 1, static_cast<int64_t>(i), i % 50 == 7 ? 8 : 0.5 + jitter(static_cast<int>(i), 0.02),
                    0.3);
        if (i + 1 == kTimes / 2)
            at_half = slow.memory_bytes();
    }
    size_t at_end = slow.memory_bytes();
    std::printf("slow samples' state: %zu bytes after %llu times, %zu after %llu\n", at_half,
                static_cast<unsigned long long>(kTimes / 2), at_end, static_cast<unsigned long long>(kTimes));
    EXPECT_LE(at_end, kStateBound);
    EXPECT_GE(at_half, 3u << 20); // (the per-sample table full by then: 2^17 slots of 24 bytes)
    auto g = slow.analyze().at(0);
    EXPECT_EQ(g.samples, kTimes);
    EXPECT_EQ(g.untracked, kTimes - SampleCounts::kMaxSamples);
    EXPECT_EQ(g.slow_times, kTimes / 50);
    EXPECT_EQ(g.not_kept, 0u);
    EXPECT_EQ(g.slow_samples, kTimes / 50);
    ASSERT_EQ(g.rows.size(), SlowSamples::kRows);
    for (const auto& r : g.rows)
        EXPECT_EQ(r.index % 50, 7);
}

// One time in five slow: more candidates than the cap. The least slow go, memory stays bounded, and the slow
// times let go of are counted as possibly missing, not hidden.
TEST(SlowSamples, MoreSlowTimesThanTheCandidatesHoldAreCounted)
{
    SlowSamples slow;
    constexpr uint64_t kTimes = 1'000'000;
    for (uint64_t i = 0; i < kTimes; i++)
        lean_sample(slow, i + 1, static_cast<int64_t>(i % 5000),
                    i % 5 == 2 ? 8 + jitter(static_cast<int>(i / 5), 4) : 0.5 + jitter(static_cast<int>(i), 0.02), 0.3);
    EXPECT_LE(slow.memory_bytes(), kStateBound);
    auto g = slow.analyze().at(0);
    std::printf("one time in five slow: %llu slow times kept, at most %llu let go of; state %zu bytes\n",
                static_cast<unsigned long long>(g.slow_times), static_cast<unsigned long long>(g.not_kept),
                slow.memory_bytes());
    EXPECT_NEAR(g.loader_threshold_ms, 1.02, 0.03);
    EXPECT_GT(g.slow_times, SlowSamples::kMaxCandidates / 2);
    EXPECT_LE(g.slow_times, SlowSamples::kMaxCandidates);
    EXPECT_GT(g.not_kept, 0u);
    EXPECT_GE(g.slow_times + g.not_kept, kTimes / 5);
    EXPECT_EQ(g.untracked, 0u);
    ASSERT_FALSE(g.rows.empty());
    EXPECT_GE(g.rows[0].loader_ms, 11.5); // the slowest kept
}
