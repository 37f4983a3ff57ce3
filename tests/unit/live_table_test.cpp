#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <string>

#include "export/live_table.h"

using namespace lotus;
using model::Span;
using model::SpanKind;

namespace {

constexpr uint64_t S = 1'000'000'000, MS = 1'000'000;

// The fields of the line that starts with `name` (split on runs of spaces, name's own words joined back).
std::vector<std::string> row(const std::string& frame, const std::string& name)
{
    std::istringstream in(frame);
    for (std::string line; std::getline(in, line);) {
        if (line.rfind(name + " ", 0) != 0)
            continue;
        std::istringstream words(line.substr(name.size()));
        std::vector<std::string> out{name};
        for (std::string w; words >> w;)
            out.push_back(w);
        return out;
    }
    return {};
}

} // namespace

TEST(LiveTable, RatesMeansAndBusyOverTheLastTwoSeconds)
{
    std::map<uint32_t, model::ProcessInfo> procs;
    procs[1].root = procs[1].consumer = true;
    procs[2].worker = true;
    procs[2].worker_id = 0;
    procs[2].owner = 1;
    procs[2].first_ns = 0;
    exporter::LiveTable t;
    // 10 s of a worker: every 100 ms a 20 ms loader then a 50 ms sample with a 40 ms crop; idle 30 ms.
    for (uint64_t at = 0; at < 10 * S; at += 100 * MS) {
        t.add(Span::make(SpanKind::Loader, "loader", 2, 2, at, at + 20 * MS));
        t.add(Span::make(SpanKind::Op, "Crop", 2, 2, at + 20 * MS, at + 60 * MS));
        t.add(Span::make(SpanKind::Sample, "sample", 2, 2, at + 20 * MS, at + 70 * MS));
    }
    // the training loop waited 500 ms in the window
    t.add(Span::make(SpanKind::Wait, "wait", 1, 1, 9 * S, 9 * S + 500 * MS));
    exporter::LiveHeader h{1, "3.11.2", 0, 123, 0};
    std::string f = t.frame(10 * S, h, procs);
    EXPECT_NE(f.find("samples/s 10.0 (last 2 s)   samples 100"), std::string::npos) << f;
    EXPECT_NE(f.find("main waiting for data 25 %"), std::string::npos) << f;
    auto crop = row(f, "Crop"); // calls/s, mean ms (window), mean ms (all), calls, time %
    ASSERT_EQ(crop.size(), 6u) << f;
    EXPECT_EQ(crop[1], "10.0");
    EXPECT_EQ(crop[2], "40.000");
    EXPECT_EQ(crop[4], "100");
    EXPECT_EQ(crop[5], "66.7"); // of the ops' and loader's time: 40 / (40 + 20)
    auto worker = row(f, "worker 0");
    ASSERT_EQ(worker.size(), 5u) << f;
    EXPECT_EQ(worker[2], "70"); // loader + sample: 70 ms of every 100
    EXPECT_EQ(worker[4], "0"); // samples: the engine's count (none here)
    // the whole pipeline last, after the ops sorted by their time
    EXPECT_LT(f.find("Crop"), f.find("loader"));
    EXPECT_LT(f.find("loader"), f.find("sample (whole pipeline)"));
}

TEST(LiveTable, ForgetsWhatLeftTheWindowAndCutsToTheTerminal)
{
    std::map<uint32_t, model::ProcessInfo> procs;
    exporter::LiveTable t;
    t.add(Span::make(SpanKind::Op, "Old", 2, 2, 1 * S, 1 * S + MS));
    exporter::LiveHeader h{1, "3.12.3", 0, 0, 0};
    std::string f = t.frame(10 * S, h, procs, 56, 6);
    auto old = row(f, "Old");
    ASSERT_FALSE(old.empty()) << f; // still listed, with its totals, but nothing in the window
    EXPECT_EQ(old[1], "0.0");
    EXPECT_EQ(old[2], "-");
    size_t lines = 0;
    std::istringstream in(f);
    for (std::string line; std::getline(in, line); lines++)
        EXPECT_LE(line.size(), 56u);
    EXPECT_EQ(lines, 6u);
}

TEST(LiveTable, NamesTheJobChoseAreEscaped)
{
    std::map<uint32_t, model::ProcessInfo> procs;
    procs[1].root = procs[1].consumer = true;
    exporter::LiveTable t;
    t.add(Span::make(SpanKind::Op, "\x1b]0;x\x07" "Crop\n", 1, 1, 9 * S, 9 * S + MS));
    exporter::LiveHeader h{1, "3.11\x1b[2J", 0, 0, 0}; // even a version string read from the target
    std::string f = t.frame(10 * S, h, procs);
    for (char c : f)
        EXPECT_TRUE(c == '\n' || static_cast<unsigned char>(c) >= 0x20) << static_cast<int>(c) << "\n" << f;
    auto crop = row(f, "\\e]0;x\\aCrop\\n"); // one line, its columns where the others' are
    ASSERT_EQ(crop.size(), 6u) << f;
    EXPECT_EQ(crop[4], "1");
    EXPECT_NE(f.find("CPython 3.11\\e[2J"), std::string::npos) << f;
}
