// The graded verdict (not / moderately / highly input-bound) per training loop, driven through the engine by the
// records a training process's DataLoader would produce, then through the summary, its renderings (text, JSON,
// HTML) and the Prometheus metrics. No BPF.
#include <gtest/gtest.h>

#include <prometheus/text_serializer.h>

#include <cstdio>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "event_builder.h"
#include "fake_requests.h"
#include "export/html_report.h"
#include "export/report.h"
#include "export/summary.h"
#include "export/timeline.h"
#include "metrics/pipeline_metrics.h"
#include "model/engine.h"

using namespace lotus;
using exporter::InputBound;

namespace {

constexpr uint64_t ITER = 0x1000, NEXT = 0x2000, COMPOSE = 0x4000, GETITEM = 0x6000, WRAP = 0x8000;
constexpr uint64_t T_LOADER = 0x10, T_SPITER = 0x30, T_COMPOSE = 0x40;
constexpr uint64_t LOADER = 0xa00, ITERATOR = 0x77;
constexpr uint64_t US = 1'000; // the records' timestamps are in ns

// A job whose training processes iterate a DataLoader without workers (each next() builds its batch: one sample
// through a Compose), with next() calls at the times a test gives: every figure comes from the records.
struct Job {
    model::Rules rules;
    exporter::Summary summary;
    test::FakeRequests requests{test::slot_resolver(ev)};
    model::Engine engine{rules, [this](const model::Span& s) { summary.add(s); }, &requests};
    test::EventBuilder ev{engine};
    int64_t sample = 0;

    void describe(uint32_t pid)
    {
        ev.code(pid, ITER, "DataLoader.__iter__", "/x/torch/utils/data/dataloader.py");
        ev.code(pid, NEXT, "_BaseDataLoaderIter.__next__", "/x/torch/utils/data/dataloader.py");
        ev.code(pid, COMPOSE, "Compose.__call__", "/x/torchvision/transforms/transforms.py");
        ev.code(pid, GETITEM, "DatasetFolder.__getitem__", "/x/torchvision/datasets/folder.py");
        ev.code(pid, WRAP, "_wrap", "/x/torch/multiprocessing/spawn.py");
        ev.type(pid, T_LOADER, "DataLoader", {"Generic", "object"});
        ev.type(pid, T_SPITER, "_SingleProcessDataLoaderIter", {"_BaseDataLoaderIter", "object"});
        ev.type(pid, T_COMPOSE, "Compose", {"object"});
    }
    // `for batch in loader` begins at `at_us` (its __iter__, 1 µs); rank >= 0: a torch.multiprocessing.spawn rank.
    void begin(uint32_t pid, uint64_t at_us, int rank = -1)
    {
        std::vector<std::tuple<uint64_t, uint8_t, int64_t>> caps;
        if (rank >= 0)
            caps.emplace_back(WRAP, 10, rank);
        ev.entry(pid, pid, at_us * US, 3, ITER, T_LOADER, {}, caps, LOADER);
        ev.ret(pid, pid, at_us * US + US, 3, ITERATOR);
    }
    // One next() from start_us that returns a batch wait_us later (its sample built inside it).
    void next(uint32_t pid, uint64_t start_us, uint64_t wait_us)
    {
        uint64_t t = start_us * US, end = t + wait_us * US;
        ev.entry(pid, pid, t, 4, NEXT, T_SPITER, {}, {}, ITERATOR);
        ev.entry(pid, pid, t + (end - t) / 3, 9, COMPOSE, T_COMPOSE, {{GETITEM, sample++}}, {}, 0xc0);
        ev.ret(pid, pid, t + 2 * (end - t) / 3, 9);
        ev.ret(pid, pid, end, 4, 0x55);
    }
    // The epoch's end: next() raises StopIteration (no batch).
    void stop(uint32_t pid, uint64_t at_us)
    {
        ev.entry(pid, pid, at_us * US, 4, NEXT, T_SPITER, {}, {}, ITERATOR);
        ev.ret(pid, pid, at_us * US + US, 4, 0);
    }
    // A training process alone (the traced root) whose loop took two batches: the first next() at 0 waited
    // first_us, the second began at second_at_us and waited second_us.
    void two_batches(uint64_t first_us, uint64_t second_at_us, uint64_t second_us, uint32_t pid = 100)
    {
        engine.add_process(pid, 0, true);
        describe(pid);
        begin(pid, 0);
        next(pid, 10, first_us);
        next(pid, 10 + second_at_us, second_us);
    }

    exporter::DataLoaderReport batches() { return exporter::summarize_batches(engine.batches(), engine.processes(), summary, 2); }
    exporter::Report report(const exporter::DataLoaderReport& b)
    {
        return exporter::build_report({summary, b, engine.processes(), {}, {}});
    }
    std::string text(const exporter::Report& r)
    {
        char* buf = nullptr;
        size_t len = 0;
        FILE* f = open_memstream(&buf, &len);
        exporter::print_report(f, r);
        fclose(f);
        std::string out(buf, len);
        free(buf);
        return out;
    }
};

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Printed prose as one line: each line break and the indent after it read as one space.
std::string flat(const std::string& text)
{
    std::string out;
    for (size_t i = 0; i < text.size(); i++) {
        if (text[i] != '\n') {
            out += text[i];
            continue;
        }
        out += ' ';
        while (i + 1 < text.size() && text[i + 1] == ' ')
            i++;
    }
    return out;
}

std::string exposition(prometheus::Registry& r) { return prometheus::TextSerializer().Serialize(r.Collect()); }

// The value of the series whose line starts with `series` (its name and labels as written), or -1.
double value(const std::string& text, const std::string& series)
{
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
        if (line.rfind(series + " ", 0) == 0)
            return std::stod(line.substr(series.size() + 1));
    return -1;
}

} // namespace

// The ladder: waiting 20 % of the loop's time or more is highly input-bound, 5 % up to 20 % moderately, under
// 5 % not; the loop's time is its first next()'s start to its last one's end. Each boundary exactly, and 1 µs
// on the other side of it.
TEST(InputBoundGrade, EachGradeAndItsBoundariesFromTheRecords)
{
    struct Case {
        uint64_t first_us, second_at_us, second_us;
        double share;
        InputBound grade;
        const char* said; // the share as the verdict says it
    };
    const Case cases[] = {
        {10'000, 90'000, 10'000, 0.20, InputBound::Highly, "20 %"},            // 20 ms of 100 ms: exactly 20 %
        {10'000, 90'001, 10'000, 20.0 / 100.001, InputBound::Moderately, "19.9 %"}, // 1 µs more: not "20 %"
        {5'000, 195'000, 5'000, 0.05, InputBound::Moderately, "5 %"},          // 10 ms of 200 ms: exactly 5 %
        {5'000, 195'001, 5'000, 10.0 / 200.001, InputBound::Not, "4.9 %"},     // just under 5 %
        {60'000, 70'000, 60'000, 120.0 / 130, InputBound::Highly, "92 %"},
        {1'000, 99'000, 10'000, 11.0 / 109, InputBound::Moderately, "10 %"},
        {1, 99'999, 1, 2.0 / 100'000, InputBound::Not, "0 %"},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(::testing::Message() << c.first_us << " " << c.second_at_us << " " << c.second_us);
        Job job;
        job.two_batches(c.first_us, c.second_at_us, c.second_us);
        auto b = job.batches();
        ASSERT_EQ(b.loops.size(), 1u);
        const auto& l = b.loops[0];
        EXPECT_EQ(l.batches, 2u);
        EXPECT_NEAR(l.waiting_share, c.share, 1e-12);
        ASSERT_TRUE(l.grade);
        EXPECT_EQ(*l.grade, c.grade);
        // The verdict says the grade, the share as it counts, and the ladder.
        std::string expect = fmt::format("The training loop waited for data {} of the time: {} (20 % or more: highly; "
                                          "5-20 %: moderately; under 5 %: not)",
                                          c.said, exporter::input_bound_text(c.grade));
        EXPECT_TRUE(has(l.verdict, expect)) << l.verdict;
        // The metrics' figures are the summary's.
        auto f = exporter::loop_figures(job.engine.batches(), 100);
        EXPECT_EQ(f.grade, l.grade);
        EXPECT_EQ(f.waiting_share, l.waiting_share);
    }
}

// The StopIteration next() that ends an epoch is part of the loop's time, not of its waiting; the grade follows.
TEST(InputBoundGrade, TheEpochsLastNextCountsInTheLoopsTimeNotItsWait)
{
    Job job;
    job.two_batches(10'000, 40'000, 10'000); // 20 ms of waiting in 50 ms: 40 %
    EXPECT_EQ(job.batches().loops[0].grade, InputBound::Highly);
    job.stop(100, 10 + 40'000 + 10'000 + 49'999); // the loop's time now 10 + 40 + 10 + 49.999 + 0.001 = 100 ms
    auto b = job.batches();
    EXPECT_NEAR(b.loops[0].waiting_share, 0.2, 1e-12);
    EXPECT_EQ(b.loops[0].grade, InputBound::Highly);
    job.stop(100, 10 + 40'000 + 10'000 + 50'000); // 20 ms in 100.001 ms
    EXPECT_EQ(job.batches().loops[0].grade, InputBound::Moderately);
}

// Where it cannot be known, no grade: a loop that consumed no batch, one whose time is none, and a job with no
// training loop at all. Nothing is invented in the text, the JSON, the HTML or the metrics.
TEST(InputBoundGrade, NotKnownIsSaidAndLeftOut)
{
    {
        Job job; // a loop whose only next() raised StopIteration
        job.engine.add_process(100, 0, true);
        job.describe(100);
        job.begin(100, 0);
        job.stop(100, 10);
        auto b = job.batches();
        ASSERT_EQ(b.loops.size(), 1u);
        EXPECT_EQ(b.loops[0].batches, 0u);
        EXPECT_FALSE(b.loops[0].grade);
        EXPECT_TRUE(has(b.loops[0].verdict, "consumed no DataLoader batch while tracing: whether it is input-bound is "
                                            "not known.")) << b.loops[0].verdict;
        EXPECT_FALSE(has(b.loops[0].verdict, "highly")) << b.loops[0].verdict;
        auto doc = nlohmann::json::parse(exporter::report_json(job.report(b)));
        EXPECT_TRUE(doc["training"][0]["input_bound_grade"].is_null());
        EXPECT_TRUE(doc["batches"]["input_bound_grade"].is_null());
        auto reg = std::make_shared<metrics::SharedRegistry>();
        metrics::PipelineMetrics m(reg, {"n1", "test", "3.11", 100, {}});
        m.refresh(job.engine.processes(), &job.engine.batches());
        std::string e = exposition(*reg);
        EXPECT_FALSE(has(e, "lotus_input_bound_grade{")) << e;
        EXPECT_FALSE(has(e, "lotus_wait_ratio{")) << e;
    }
    {
        Job job; // one batch, returned in no time: no loop time to share
        job.engine.add_process(100, 0, true);
        job.describe(100);
        job.begin(100, 0);
        job.ev.entry(100, 100, 10 * US, 4, NEXT, T_SPITER, {}, {}, ITERATOR);
        job.ev.ret(100, 100, 10 * US, 4, 0x55);
        auto b = job.batches();
        ASSERT_EQ(b.loops.size(), 1u);
        EXPECT_EQ(b.loops[0].batches, 1u);
        EXPECT_FALSE(b.loops[0].grade);
        EXPECT_TRUE(has(b.loops[0].verdict, "whether it is input-bound is not known")) << b.loops[0].verdict;
    }
    {
        Job job; // samples, but no training loop seen (no next())
        job.engine.add_process(100, 0, true);
        job.describe(100);
        job.ev.entry(100, 100, 10 * US, 9, COMPOSE, T_COMPOSE, {{GETITEM, 0}}, {}, 0xc0);
        job.ev.ret(100, 100, 20 * US, 9);
        job.engine.finish(); // (the run's end: the sample's call is complete)
        auto b = job.batches();
        EXPECT_TRUE(b.loops.empty());
        auto r = job.report(b);
        ASSERT_FALSE(r.loaders.empty());
        std::string t = job.text(r);
        EXPECT_TRUE(has(flat(t), "No training loop was seen taking a batch (its next() calls): whether the job is "
                                 "input-bound is not known.")) << t;
        EXPECT_FALSE(has(t, "highly")) << t;
        auto doc = nlohmann::json::parse(exporter::report_json(r));
        EXPECT_TRUE(doc["batches"].is_null());
        EXPECT_TRUE(doc["training"].empty());
        EXPECT_EQ(doc["input_bound_thresholds"]["moderately"], 0.05); // the ladder is stated even so
        EXPECT_EQ(doc["input_bound_thresholds"]["highly"], 0.2);
        std::string h = exporter::html_report(r, exporter::Timeline(0));
        EXPECT_TRUE(has(h, "no verdict (whether the job is input-bound is not known)"));
        EXPECT_FALSE(has(h, "\" data-input-bound=")) << h; // (no paragraph carries a grade)
    }
}

// Two ranks (torch.multiprocessing.spawn's), each graded on its own loop: rank 0 waited 40 % of its time, rank 1
// 2 %. The text, the JSON (training, ranks), the HTML and the metrics agree.
TEST(InputBoundGrade, PerRankInEveryRendering)
{
    constexpr uint32_t L = 100, A = 110, B = 120;
    Job job;
    job.engine.add_process(L, 0, true);
    job.describe(L);
    job.ev.proc(LOTUS_EV_FORK, A, L, L);
    job.ev.proc(LOTUS_EV_FORK, B, L, L);
    job.begin(A, 0, 0);
    job.begin(B, 0, 1);
    job.next(A, 10, 20'000);           // rank 0: 20 + 20 ms of waiting in 100 ms
    job.next(A, 10 + 80'000, 20'000);
    job.next(B, 10, 1'000);            // rank 1: 1 + 1 ms in 100 ms
    job.next(B, 10 + 99'000, 1'000);
    auto b = job.batches();
    ASSERT_EQ(b.loops.size(), 2u);
    auto r = job.report(b);
    ASSERT_EQ(r.ranks.size(), 2u);
    std::map<std::string, std::optional<InputBound>> by_label;
    for (const auto& k : r.ranks)
        by_label[k.label] = k.grade;
    EXPECT_EQ(by_label["rank 0"], InputBound::Highly);
    EXPECT_EQ(by_label["rank 1"], InputBound::Not);

    std::string t = job.text(r);
    EXPECT_TRUE(has(flat(t), "The training loop of rank 0 waited for data 40 % of the time: highly input-bound")) << t;
    EXPECT_TRUE(has(flat(t), "The training loop of rank 1 waited for data 2 % of the time: not input-bound")) << t;
    auto row = [&](const char* label) { // the ranks table's line
        size_t at = t.find(std::string("\n") + label + " ");
        return at == std::string::npos ? std::string() : t.substr(at + 1, t.find('\n', at + 1) - at - 1);
    };
    EXPECT_TRUE(has(row("rank 0"), "highly input-bound")) << t;
    EXPECT_TRUE(has(row("rank 1"), "not input-bound")) << t;
    EXPECT_TRUE(has(flat(t), "verdict: wait 20 % or more highly input-bound, 5-20 % moderately, under 5 % not")) << t;

    auto doc = nlohmann::json::parse(exporter::report_json(r));
    std::map<uint32_t, std::string> training;
    for (const auto& l : doc["training"])
        training[l["pid"].get<uint32_t>()] = l["input_bound_grade"].get<std::string>();
    EXPECT_EQ(training, (std::map<uint32_t, std::string>{{A, "highly"}, {B, "not"}}));
    for (const auto& k : doc["ranks"]) {
        bool zero = k["rank"] == 0;
        EXPECT_EQ(k["input_bound_grade"], zero ? "highly" : "not");
        EXPECT_EQ(k["input_bound"], zero); // (the one grade of earlier versions: highly)
    }
    EXPECT_TRUE(doc["batches"].is_null()); // (two training processes)

    std::string h = exporter::html_report(r, exporter::Timeline(0));
    EXPECT_TRUE(has(h, "<p class=\"verdict\" data-input-bound=\"highly\">The training loop of rank 0 waited for data 40 %")) << h;
    EXPECT_TRUE(has(h, "<p class=\"verdict\" data-input-bound=\"not\">The training loop of rank 1 waited for data 2 %")) << h;
    EXPECT_TRUE(has(h, "<td>highly input-bound</td></tr>"));
    EXPECT_TRUE(has(h, "<td>not input-bound</td></tr>"));

    // The metric: one series per rank, 2 highly, 0 not, with its share.
    auto reg = std::make_shared<metrics::SharedRegistry>();
    metrics::PipelineMetrics m(reg, {"n1", "test", "3.11", L, {}});
    m.refresh(job.engine.processes(), &job.engine.batches());
    std::string e = exposition(*reg);
    EXPECT_EQ(value(e, "lotus_input_bound_grade{local_rank=\"0\",node=\"n1\"}"), 2) << e;
    EXPECT_EQ(value(e, "lotus_input_bound_grade{local_rank=\"1\",node=\"n1\"}"), 0) << e;
    EXPECT_DOUBLE_EQ(value(e, "lotus_wait_ratio{local_rank=\"0\",node=\"n1\"}"), 0.4) << e;
    EXPECT_DOUBLE_EQ(value(e, "lotus_wait_ratio{local_rank=\"1\",node=\"n1\"}"), 0.02) << e;
    EXPECT_TRUE(has(e, "# TYPE lotus_input_bound_grade gauge")) << e;

    // Rank 1 falls behind: its next batch takes 30 ms (32 ms of 130 ms, 24.6 %); the next refresh says so.
    job.next(B, 10 + 100'000, 30'000);
    m.refresh(job.engine.processes(), &job.engine.batches());
    e = exposition(*reg);
    EXPECT_EQ(value(e, "lotus_input_bound_grade{local_rank=\"1\",node=\"n1\"}"), 2) << e;
    EXPECT_EQ(exporter::loop_figures(job.engine.batches(), B).grade, InputBound::Highly);
}
