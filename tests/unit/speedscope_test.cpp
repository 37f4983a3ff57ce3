// exporter::SpeedscopeWriter: the speedscope file's profiles per role, its frames, and what it leaves out.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "export/speedscope.h"

using namespace lotus;
using model::Span;
using model::SpanKind;

namespace {

nlohmann::json written(const exporter::SpeedscopeWriter& w, const std::map<uint32_t, model::ProcessInfo>& procs,
                       uint64_t expect_left_out)
{
    auto path = std::filesystem::temp_directory_path() / fmt::format("lotus-speedscope-{}.json", getpid());
    {
        common::OutputFile out(path);
        EXPECT_EQ(w.write(out, procs, "lotus-bpf test", 1000), expect_left_out);
        EXPECT_TRUE(out.commit());
    }
    std::ifstream in(path);
    auto doc = nlohmann::json::parse(in);
    std::filesystem::remove(path);
    return doc;
}

// "O name at" / "C name at" of a profile's events.
std::vector<std::string> events(const nlohmann::json& doc, const nlohmann::json& profile)
{
    std::vector<std::string> out;
    for (const auto& e : profile["events"])
        out.push_back(fmt::format("{} {} {}", e["type"].get<std::string>(),
                                  doc["shared"]["frames"][e["frame"].get<size_t>()]["name"].get<std::string>(),
                                  e["at"].get<uint64_t>()));
    return out;
}

} // namespace

// One profile per role: the two processes that played worker 0 (one per epoch) are one stack; the training loop
// is its own. Ops, loaders, collations, native functions and waits are frames; samples and batches are not.
TEST(Speedscope, OneProfilePerRoleFramesByName)
{
    std::map<uint32_t, model::ProcessInfo> procs;
    procs[10].pid = 10, procs[10].root = true, procs[10].consumer = true;
    for (uint32_t w : {11u, 12u}) {
        procs[w].pid = w, procs[w].parent = 10, procs[w].worker = true, procs[w].worker_id = 0;
        procs[w].owner = 10, procs[w].loader = 0;
    }
    exporter::SpeedscopeWriter w;
    auto add = [&](SpanKind k, const char* name, uint32_t pid, uint64_t a, uint64_t b) {
        w.add(Span::make(k, name, pid, pid, a, b));
    };
    add(SpanKind::Native, "ImagingJpegDecode", 11, 1060, 1080); // spans come as they end: inner ones first
    add(SpanKind::Loader, "loader", 11, 1050, 1090);
    add(SpanKind::Op, "Crop", 11, 1100, 1200);
    add(SpanKind::Sample, "sample", 11, 1090, 1210);
    add(SpanKind::Collate, "collate", 11, 1210, 1250);
    add(SpanKind::Batch, "batch", 11, 1040, 1250);
    add(SpanKind::Op, "Crop", 12, 1300, 1400); // the next epoch's worker 0
    add(SpanKind::Wait, "wait", 10, 1000, 1500);
    auto doc = written(w, procs, 0);
    EXPECT_EQ(doc["exporter"], "lotus-bpf test");
    ASSERT_EQ(doc["profiles"].size(), 2u);
    EXPECT_EQ(doc["profiles"][0]["name"], "main");
    EXPECT_EQ(events(doc, doc["profiles"][0]), (std::vector<std::string>{"O wait 0", "C wait 500"}));
    const auto& worker = doc["profiles"][1];
    EXPECT_EQ(worker["name"], "worker 0");
    EXPECT_EQ(worker["type"], "evented");
    EXPECT_EQ(worker["unit"], "nanoseconds");
    EXPECT_EQ(events(doc, worker),
              (std::vector<std::string>{"O loader 50", "O ImagingJpegDecode 60", "C ImagingJpegDecode 80",
                                        "C loader 90", "O Crop 100", "C Crop 200", "O collate 210", "C collate 250",
                                        "O Crop 300", "C Crop 400"}));
    EXPECT_EQ(worker["startValue"], 50);
    EXPECT_EQ(worker["endValue"], 400);
    EXPECT_EQ(doc["shared"]["frames"].size(), 5u); // Crop once, whichever process ran it
    EXPECT_EQ(doc["name"], "lotus-bpf: the pipeline's spans per role");
}

// Two spans of one role that overlap without nesting cannot be one stack: the later one is left out, and the
// file's name says so. A process folded into its role's row stays in that role.
TEST(Speedscope, OverlapsAreLeftOutAndSaid)
{
    std::map<uint32_t, model::ProcessInfo> procs;
    procs[10].pid = 10, procs[10].root = true;
    procs[11].pid = 11, procs[11].worker = true, procs[11].worker_id = 1, procs[11].owner = 10, procs[11].loader = 0;
    exporter::SpeedscopeWriter w;
    w.add(Span::make(SpanKind::Op, "A", 11, 11, 1100, 1200));
    w.add(Span::make(SpanKind::Op, "B", 13, 13, 1150, 1250)); // worker 1's next process, still running A's time
    w.folded(13, 11);
    auto doc = written(w, procs, 1);
    ASSERT_EQ(doc["profiles"].size(), 1u);
    EXPECT_EQ(doc["profiles"][0]["name"], "worker 1");
    EXPECT_EQ(events(doc, doc["profiles"][0]), (std::vector<std::string>{"O A 100", "C A 200"}));
    EXPECT_EQ(doc["name"], "lotus-bpf: the pipeline's spans per role (1 left out: 1 overlapping without nesting, 0 past "
                           "4000000 spans)");
}

// A process's other threads (a result queue's feeder thread pickling a batch while the main thread runs the next
// sample's ops) are a profile of their own: their spans overlap the main thread's without nesting.
TEST(Speedscope, OtherThreadsAreAProfileOfTheirOwn)
{
    std::map<uint32_t, model::ProcessInfo> procs;
    procs[10].pid = 10, procs[10].root = true;
    procs[11].pid = 11, procs[11].worker = true, procs[11].worker_id = 0, procs[11].owner = 10, procs[11].loader = 0;
    exporter::SpeedscopeWriter w;
    w.add(Span::make(SpanKind::Op, "Crop", 11, 11, 1100, 1200));
    w.add(Span::make(SpanKind::Native, "memcpy", 11, 17, 1150, 1250)); // the feeder thread
    auto doc = written(w, procs, 0);
    ASSERT_EQ(doc["profiles"].size(), 2u);
    EXPECT_EQ(doc["profiles"][0]["name"], "worker 0");
    EXPECT_EQ(events(doc, doc["profiles"][0]), (std::vector<std::string>{"O Crop 100", "C Crop 200"}));
    EXPECT_EQ(doc["profiles"][1]["name"], "worker 0, other threads");
    EXPECT_EQ(events(doc, doc["profiles"][1]), (std::vector<std::string>{"O memcpy 150", "C memcpy 250"}));
    EXPECT_EQ(doc["name"], "lotus-bpf: the pipeline's spans per role");
}
