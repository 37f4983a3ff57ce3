#include <gtest/gtest.h>

#include <algorithm>

#include "export/summary.h"

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
    EXPECT_EQ(rows[0].first, "B");
    EXPECT_EQ(rows[0].second.count, 2u);
    EXPECT_DOUBLE_EQ(rows[0].second.mean_ms, 3.0);
    EXPECT_EQ(rows[1].first, "A");
    EXPECT_EQ(rows[2].first, "sample");
}

TEST(Summary, SaysWhenNoPipelineWasSeen)
{
    exporter::Summary sum;
    char buf[4096] = {};
    FILE* f = fmemopen(buf, sizeof(buf), "w");
    sum.print(f, {}, exporter::DataLoaderReport{}, {});
    fclose(f);
    EXPECT_NE(std::string(buf).find("No pipeline was seen"), std::string::npos);
}

TEST(DurationSeries, ExactUpToItsLimitThenWithinABucketInBoundedMemory)
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
        EXPECT_NEAR(got, want, want / exporter::DurationSeries::kSubBuckets) << q;
    }
    auto s = exporter::stats_of(d);
    double mean = 0;
    for (auto v : all)
        mean += double(v);
    mean /= double(all.size());
    EXPECT_NEAR(s.mean_ms, mean / 1e6, 1e-9);
}
