// --op-csv (cli/sink_op_csv.cpp): the summary's own per-op figures, one CSV row per row of the summary, through
// the sink Outputs chooses for the option.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <sstream>

#include "export/summary.h"
#include "outputs.h"

using namespace lotus;

namespace {

// Ops A (1, 2, 3, 10 ms) and "x,\"y\"" (4 ms), then two samples: the summary's rows.
exporter::Rows rows()
{
    exporter::Summary sum;
    auto add = [&](model::SpanKind kind, const char* name, uint64_t ms) {
        sum.add(model::Span::make(kind, name, 7, 7, 0, ms * 1'000'000));
    };
    for (uint64_t ms : {1, 2, 3, 10})
        add(model::SpanKind::Op, "A", ms);
    add(model::SpanKind::Op, "x,\"y\"", 4);
    add(model::SpanKind::Sample, "sample", 5);
    add(model::SpanKind::Sample, "sample", 15);
    return sum.rows();
}

} // namespace

TEST(OpCsv, OneRowPerSummaryRowWithItsOwnFigures)
{
    auto r = rows();
    ASSERT_EQ(r.size(), 3u);
    auto text = cli::op_csv_text(r);
    std::istringstream in(text);
    std::string line;
    std::getline(in, line);
    EXPECT_EQ(line, "part,name,count,total_ms,mean_ms,p50_ms,p95_ms");
    const auto& a = r[0].stats;
    EXPECT_EQ(a.count, 4u);
    EXPECT_DOUBLE_EQ(a.total_ms, 16.0);
    std::getline(in, line);
    EXPECT_EQ(line, fmt::format("op,A,4,16.0000,4.0000,{:.4f},{:.4f}", a.p50_ms, a.p95_ms));
    std::getline(in, line);
    EXPECT_EQ(line, "op,\"x,\"\"y\"\"\",1,4.0000,4.0000,4.0000,4.0000"); // quoted, its quotes doubled
    std::getline(in, line);
    EXPECT_EQ(line, fmt::format("sample,sample,2,20.0000,10.0000,{:.4f},{:.4f}", r[2].stats.p50_ms, r[2].stats.p95_ms));
    EXPECT_FALSE(std::getline(in, line));
}

// The option alone brings the sink: Outputs opens its file, and the run's end writes it there.
TEST(OpCsv, TheOptionChoosesTheSinkThatWritesTheFile)
{
    auto path = std::filesystem::temp_directory_path() / fmt::format("lotus-op-csv-{}.csv", getpid());
    cli::Options opts;
    opts.output.clear();
    opts.print_summary = false;
    opts.file_sinks["--op-csv"] = path;
    cli::Outputs outputs(opts);
    ASSERT_EQ(outputs.sinks().size(), 2u); // the trace (discarding) and the CSV
    exporter::RunInfo run;
    exporter::Report report;
    report.ops = rows();
    exporter::Timeline timeline(0);
    cli::Processes processes;
    cli::RunEnd end{run, report, timeline, processes, outputs.failures(), 0};
    for (const auto& s : outputs.sinks())
        s->end_of_run(end);
    std::ifstream in(path);
    std::stringstream got;
    got << in.rdbuf();
    EXPECT_EQ(got.str(), cli::op_csv_text(report.ops));
    EXPECT_TRUE(outputs.failures().empty());
    std::filesystem::remove(path);
}
