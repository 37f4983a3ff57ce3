#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <tuple>

#include <fmt/format.h>
#include <string>

#include "event_builder.h"
#include "export/html_report.h"
#include "export/timeline.h"

using namespace lotus;

namespace {

model::Span span(model::SpanKind k, uint32_t pid, uint64_t start_ms, uint64_t end_ms)
{
    return model::Span::make(k, k == model::SpanKind::Sample ? "sample" : "x", pid, pid, start_ms * 1'000'000,
                             end_ms * 1'000'000);
}

uint64_t sum(const std::vector<uint64_t>& v) { return std::accumulate(v.begin(), v.end(), uint64_t{0}); }

size_t count(const std::string& s, const std::string& part)
{
    size_t n = 0;
    for (size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1))
        n++;
    return n;
}

} // namespace

TEST(Timeline, SplitsSpansExactlyAcrossBins)
{
    exporter::Timeline tl(1'000'000'000); // t0 = 1 s
    tl.add(span(model::SpanKind::Batch, 7, 1030, 1120)); // 30..120 ms: 20 ms in bin 0, 50 in bin 1, 20 in bin 2
    tl.add(span(model::SpanKind::Wait, 3, 990, 1010));   // begun before t0: only its 10 ms after count
    tl.add(span(model::SpanKind::Sample, 7, 1000, 1049));
    tl.add(span(model::SpanKind::Sample, 7, 1050, 1100)); // ends exactly at the end of bin 1
    tl.add(span(model::SpanKind::Op, 7, 1000, 5000));     // not on the timeline
    ASSERT_EQ(tl.width_ns(), exporter::Timeline::kFirstWidthNs);
    EXPECT_EQ(tl.bins(), 3u);
    EXPECT_EQ(tl.end_ns(), 120'000'000u);
    EXPECT_EQ(tl.busy_ns().at(7).v, (std::vector<uint64_t>{20'000'000, 50'000'000, 20'000'000}));
    EXPECT_EQ(tl.wait_ns().at(3).v, (std::vector<uint64_t>{10'000'000}));
    EXPECT_EQ(tl.samples(), (std::vector<uint64_t>{1, 1}));
}

TEST(Timeline, WidensBinsInsteadOfGrowingPastTheLimit)
{
    exporter::Timeline tl(0);
    uint64_t busy = 0;
    for (uint64_t ms = 0; ms < 100'000; ms += 70) { // 100 s of 30 ms batches every 70 ms
        tl.add(span(model::SpanKind::Batch, 1, ms, ms + 30));
        tl.add(span(model::SpanKind::Sample, 1, ms, ms + 30));
        busy += 30'000'000;
    }
    EXPECT_LE(tl.bins(), exporter::Timeline::kMaxBins);
    EXPECT_GT(tl.bins(), exporter::Timeline::kMaxBins / 2);
    EXPECT_EQ(tl.width_ns(), 400'000'000u); // 50 ms doubled three times
    EXPECT_EQ(sum(tl.busy_ns().at(1).v), busy); // nothing lost in the merges
    EXPECT_EQ(sum(tl.samples()), 1429u);
    for (uint64_t b : tl.busy_ns().at(1).v)
        EXPECT_LE(b, tl.width_ns());
}

// Processes alive for a few bins each (a DataLoader worker per epoch) keep those bins only, through the merges.
TEST(Timeline, KeepsAProcessFromItsFirstBinToItsLast)
{
    exporter::Timeline tl(0);
    uint64_t busy = 0;
    for (uint32_t pid = 100; pid < 400; pid++) { // 300 processes, each busy 1 s, one after the other
        uint64_t ms = (pid - 100) * 1000;
        for (uint64_t t = ms; t < ms + 1000; t += 100) {
            tl.add(span(model::SpanKind::Batch, pid, t, t + 60));
            busy += 60'000'000;
        }
    }
    uint64_t seen = 0;
    for (const auto& [pid, b] : tl.busy_ns()) {
        EXPECT_LE(b.v.size(), 2u) << pid; // 1 s in bins of 800 ms
        EXPECT_EQ(b.first, (pid - 100) * 1'000'000'000ull / tl.width_ns()) << pid;
        seen += sum(b.v);
    }
    EXPECT_EQ(seen, busy);
    EXPECT_EQ(tl.busy_ns().at(399).at(tl.bins() - 1), tl.busy_ns().at(399).v.back());
    EXPECT_EQ(tl.busy_ns().at(100).at(tl.bins() - 1), 0u);
}

// A small job as the engine would report it: a training loop, two workers, ops, loaders, batches and waits.
struct HtmlReport : test::JobFixture {
    exporter::Timeline timeline{0};
    exporter::RunInfo run;

    void SetUp() override
    {
        run.tool = "lotus-bpf test";
        run.python = "3.11.2";
        run.target_pid = P;
        run.cpus = 2;
        processes[P].root = true;
        processes[P].consumer = true;
        test::add_workers(processes, P, {W0, W1}, 5, 500'000'000, 0);
        uint64_t t = 0;
        for (int i = 0; i < 10; i++, t += 100'000'000) {
            tracker.next_started(P, P, t, 0x70, false);
            tracker.next_finished(P, P, t, t + (i % 2 ? 2'000'000 : 500'000), false);
            timeline.add(model::Span::make(model::SpanKind::Wait, "wait", P, P, t, t + 2'000'000));
            timeline.add(model::Span::make(model::SpanKind::Batch, "batch", W0 + i % 2, W0, t, t + 90'000'000));
        }
        for (int i = 0; i < 50; i++) {
            uint64_t s0 = static_cast<uint64_t>(i) * 20'000'000;
            for (auto [k, name, ms] : {std::tuple{model::SpanKind::Loader, "loader", 3},
                                       std::tuple{model::SpanKind::Op, "Resize", 5},
                                       std::tuple{model::SpanKind::Sample, "sample", 6}}) {
                auto s = model::Span::make(k, name, W0, W0, s0, s0 + static_cast<uint64_t>(ms) * 1'000'000 + i * 1000);
                s.owner = P;
                s.loader = 0;
                summary.add(s);
                timeline.add(s);
            }
        }
    }
    // delays: as the tracker reports them once consumed batches are matched to the batch spans that made them
    // (batch_tracker_test.cpp covers that matching); none by default
    std::vector<uint64_t> delays_ns;
    std::string html(std::vector<std::string> notes = {})
    {
        auto batches = exporter::summarize_batches(tracker, processes, summary, run.cpus);
        if (!delays_ns.empty() && !batches.loops.empty()) {
            auto& all = batches.loops[0].all;
            all.delay = exporter::stats_of(delays_ns);
            for (uint64_t d : delays_ns)
                (d <= 1'000'000 ? all.delay_le_1ms : d <= 500'000'000 ? all.delay_1_500ms : all.delay_gt_500ms)++;
        }
        return exporter::html_report(exporter::build_report({summary, batches, processes, run, std::move(notes)}),
                                     timeline);
    }
};

TEST_F(HtmlReport, EveryChartAndNothingOnline)
{
    summary.set_counter_names({"task-clock"});
    model::OpNativeMap op{"Resize", model::Claim::Op, 10, 9, 1, {{"ImagingResample", "libImaging.so", 8}, {"memcpy", "libc.so.6", 1}}};
    summary.set_native_map({op});
    delays_ns = {100'000, 2'000'000, 3'000'000, 600'000'000};
    std::string h = html();
    EXPECT_EQ(h.rfind("<!DOCTYPE html>", 0), 0u);
    for (const char* chart : {"op-durations", "wait-histogram", "delay-histogram", "samples-per-second",
                              "busy-over-time", "native-map"})
        EXPECT_EQ(count(h, fmt::format("data-chart=\"{}\">\n<svg", chart)), 1u) << chart;
    EXPECT_EQ(count(h, "data-chart=\"counters\""), 1u);
    EXPECT_EQ(h.find("http"), std::string::npos);   // no link, no namespace URL: nothing to fetch
    EXPECT_EQ(h.find("<script"), std::string::npos); // nothing runs
    EXPECT_EQ(h.find("<link"), std::string::npos);
    // the box plot's figures, from the summary's own statistics
    EXPECT_NE(h.find("Resize: 50 calls; min 5 ms, p25 5.01 ms, median 5.02 ms"), std::string::npos);
    EXPECT_NE(h.find("sample (whole pipeline)"), std::string::npos);
    // waits: 5 of at most 1 ms, 5 of 1-500 ms
    EXPECT_NE(h.find("≤ 1 ms: 5 of 10 (50.0 %)"), std::string::npos);
    EXPECT_NE(h.find("1–500 ms: 5 of 10 (50.0 %)"), std::string::npos);
    EXPECT_NE(h.find("1–500 ms: 2 of 4 (50.0 %)"), std::string::npos); // delays
    EXPECT_NE(h.find("&gt; 500 ms: 1 of 4 (25.0 %)"), std::string::npos);
    EXPECT_NE(h.find("ImagingResample (libImaging.so): 8 samples, 80.0 % of Resize"), std::string::npos);
    EXPECT_NE(h.find("worker 0: busy"), std::string::npos);
    EXPECT_NE(h.find("main: waiting in next()"), std::string::npos);
    EXPECT_NE(h.find("class=\"verdict\""), std::string::npos);
}

TEST_F(HtmlReport, SaysWhatItCannotShowInsteadOfDrawingIt)
{
    std::string h = html();
    EXPECT_NE(h.find("No native map: the run was not traced with --native-map"), std::string::npos);
    EXPECT_NE(h.find("No counters: the run was not traced with --counters"), std::string::npos);
    // no consumed batch was matched to a batch span here: no delay is known, none is drawn
    EXPECT_NE(h.find("No delay is known"), std::string::npos);
    EXPECT_EQ(count(h, "data-chart=\"delay-histogram\">\n<svg"), 0u);

    exporter::Summary empty;
    std::map<uint32_t, model::ProcessInfo> none;
    exporter::Timeline tl{0};
    exporter::DataLoaderReport nothing;
    std::string e = exporter::html_report(exporter::build_report({empty, nothing, none, run, {}}), tl);
    EXPECT_NE(e.find("No op, loader or pipeline call was seen"), std::string::npos);
    EXPECT_NE(e.find("No sample (pipeline call) completed"), std::string::npos);
    EXPECT_NE(e.find("no verdict"), std::string::npos);
    EXPECT_EQ(e.find("<svg"), std::string::npos);
}

TEST_F(HtmlReport, TextIsEscapedAndUtf8PassesThrough)
{
    auto s = model::Span::make(model::SpanKind::Op, "<script>alert(1)</script>", W0, W0, 0, 1'000'000);
    summary.add(s);
    std::string h = html({"dataset café/img_ü.jpg \xff end"});
    EXPECT_EQ(h.find("<script>"), std::string::npos);
    EXPECT_NE(h.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
    EXPECT_NE(h.find("café/img_ü.jpg \xEF\xBF\xBD end"), std::string::npos);
    EXPECT_EQ(exporter::html_escape("a\"b'c&"), "a&quot;b&#39;c&amp;");
}
