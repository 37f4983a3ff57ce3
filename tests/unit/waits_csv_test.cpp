// --waits-csv (cli/sink_waits_csv.cpp): the report's longest waits, one CSV row each with the figures of the
// summary JSON's `waits.rows`, through the sink Outputs chooses for the option (its line in cli/sinks.def).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <sstream>

#include "outputs.h"

using namespace lotus;

namespace {

// The text --waits-csv writes for these waits, through Outputs as a run would.
std::string written(const std::vector<model::WaitRow>& waits)
{
    auto path = std::filesystem::temp_directory_path() / fmt::format("lotus-waits-csv-{}.csv", getpid());
    cli::Options opts;
    opts.output.clear();
    opts.print_summary = false;
    opts.file_sinks["--waits-csv"] = path;
    cli::Outputs outputs(opts);
    EXPECT_EQ(outputs.sinks().size(), 2u); // the trace (discarding) and the CSV
    exporter::RunInfo run;
    exporter::Report report;
    report.waits = waits;
    exporter::Timeline timeline(0);
    cli::Processes processes;
    cli::RunEnd end{run, report, timeline, processes, outputs.failures(), 0};
    for (const auto& s : outputs.sinks())
        s->end_of_run(end);
    EXPECT_TRUE(outputs.failures().empty());
    std::ifstream in(path);
    std::stringstream got;
    got << in.rdbuf();
    std::filesystem::remove(path);
    return got.str();
}

const char* kHeader = "owner,loader,batch,epoch,wait_ms,worker,worker_pid,prepare_ms,later_ready,slowest_sample,"
                      "slowest_path,slowest_op,slowest_ms,cause,cause_op,cause_ms,causes\n";

} // namespace

TEST(WaitsCsv, OneRowPerWaitWithItsBatchAndCauses)
{
    model::WaitRow w;
    w.owner = 100;
    w.pid = 100;
    w.loader = 0;
    w.batch = 7;
    w.epoch = 1;
    w.start_ns = 1'000'000'000;
    w.end_ns = 1'012'345'678; // 12.345678 ms
    w.worker_pid = 101;
    w.worker_id = 1;
    w.prepare_ns = 40'000'000;
    w.later_ready = true;
    w.slowest_sample = 42;
    w.slowest_path = "/data/a,b.jpg";
    w.slowest_part = "Resize";
    w.slowest_ns = 9'000'500;
    w.parts = {{model::WaitCause::Op, "Resize", 10'000'000}, {model::WaitCause::HandOver, "", 2'345'678}};
    EXPECT_EQ(written({w}), std::string(kHeader) +
                                "100,0,7,1,12.346,1,101,40.000,true,42,\"/data/a,b.jpg\",Resize,9.001,op,Resize,10.000,"
                                "op:Resize=10.000;hand_over=2.346\n");
}

// What is not known is an empty field (the JSON's null): no batch, worker, slowest sample or cause.
TEST(WaitsCsv, UnknownFiguresAreEmptyFields)
{
    model::WaitRow w;
    w.owner = 5;
    w.loader = -1;
    w.start_ns = 0;
    w.end_ns = 500'000;
    EXPECT_EQ(written({w}), std::string(kHeader) + "5,-1,,,0.500,,,,false,,,,,,,,\n");
}

TEST(WaitsCsv, NoWaitsIsTheHeaderAlone) { EXPECT_EQ(written({}), kHeader); }
