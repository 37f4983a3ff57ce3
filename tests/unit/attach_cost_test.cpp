// The attach's cost in the run's facts (cli/self_usage.h, export/run_info.h): measured between two marks, said
// only where measured.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli/self_usage.h"
#include "export/run_info.h"

namespace lotus {
namespace {

TEST(AttachCost, BetweenTwoMarks)
{
    auto cost = cli::usage_between({1'000'000'000, 2'000}, {1'250'500'000, 42'500});
    ASSERT_TRUE(cost);
    EXPECT_DOUBLE_EQ(cost->wall_ms, 250.5);
    EXPECT_DOUBLE_EQ(cost->cpu_ms, 40.5);
}

TEST(AttachCost, NoneWhereNotKnown)
{
    EXPECT_FALSE(cli::usage_between({0, -1}, {10, 5}));        // getrusage failed at the start
    EXPECT_FALSE(cli::usage_between({0, 5}, {10, 4}));         // CPU time went backwards
    EXPECT_FALSE(cli::usage_between({10, 5}, {9, 6}));         // the clock went backwards
}

TEST(AttachCost, MarksOfThisProcess)
{
    auto from = cli::usage_now();
    volatile double x = 0;
    for (int i = 0; i < 2'000'000; i++)
        x = x + i * 0.5;
    auto cost = cli::usage_between(from, cli::usage_now());
    ASSERT_TRUE(cost);
    EXPECT_GE(cost->wall_ms, 0);
    EXPECT_GE(cost->cpu_ms, 0);
}

TEST(AttachCost, InTheRunsJsonOnlyWhereMeasured)
{
    exporter::RunInfo run;
    auto without = exporter::run_json(run);
    EXPECT_FALSE(without.contains("attach_wall_ms"));
    EXPECT_FALSE(without.contains("attach_cpu_ms"));
    run.attach = exporter::RunInfo::AttachCost{812.25, 640.1254};
    auto with = exporter::run_json(run);
    EXPECT_DOUBLE_EQ(with["attach_wall_ms"].get<double>(), 812.25);
    EXPECT_DOUBLE_EQ(with["attach_cpu_ms"].get<double>(), 640.125); // to the microsecond
}

} // namespace
} // namespace lotus
