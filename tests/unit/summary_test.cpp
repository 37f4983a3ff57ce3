#include <gtest/gtest.h>

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
    sum.print(f, {}, nullptr, {});
    fclose(f);
    EXPECT_NE(std::string(buf).find("No pipeline was seen"), std::string::npos);
}
