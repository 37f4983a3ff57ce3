#include <gtest/gtest.h>

#include <fmt/format.h>
#include <prometheus/text_serializer.h>

#include <map>
#include <sstream>
#include <string>

#include "metrics/agent_metrics.h"
#include "metrics/endpoint.h"
#include "metrics/pipeline_metrics.h"

using namespace lotus;
using model::Span;
using model::SpanKind;

namespace {

constexpr uint64_t MS = 1'000'000;

std::string exposition(prometheus::Registry& r)
{
    return prometheus::TextSerializer().Serialize(r.Collect());
}

// The value of the series whose line starts with `series` (its name and labels as written), or -1.
double value(const std::string& text, const std::string& series)
{
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
        if (line.rfind(series + " ", 0) == 0)
            return std::stod(line.substr(series.size() + 1));
    return -1;
}

// A training process (rank 1 of 4, local rank 1) and its worker 0.
std::map<uint32_t, model::ProcessInfo> ranked_job()
{
    std::map<uint32_t, model::ProcessInfo> procs;
    auto& t = procs[10];
    t.pid = 10;
    t.consumer = true;
    t.env_rank = 1;
    t.local_rank = 1;
    t.world_size = 4;
    auto& w = procs[11];
    w.pid = 11;
    w.worker = true;
    w.worker_id = 0;
    w.owner = 10;
    w.env_rank = 1; // (inherited: not the worker's own)
    return procs;
}

Span owned(SpanKind k, std::string name, uint32_t pid, uint64_t start, uint64_t end)
{
    Span s = Span::make(k, std::move(name), pid, pid, start, end);
    s.owner = 10;
    s.loader = 0;
    return s;
}

} // namespace

TEST(PipelineMetrics, SpansBecomeCountersAndHistogramsLabelledByRankLoaderWorkerAndOp)
{
    auto reg = std::make_shared<metrics::SharedRegistry>();
    metrics::PipelineMetrics m(reg, {"node-a", "0.1.0", "3.11.2", 4242, {}});
    auto procs = ranked_job();
    for (int i = 0; i < 3; i++) {
        uint64_t at = i * 100 * MS;
        m.span(owned(SpanKind::Loader, "loader", 11, at, at + 2 * MS), procs);
        m.span(owned(SpanKind::Op, "ToTensor", 11, at + 2 * MS, at + 5 * MS), procs);
        Span op = owned(SpanKind::Op, "ColorJitter", 11, at + 5 * MS, at + 6 * MS);
        op.container = "RandomApply";
        m.span(op, procs);
        m.span(owned(SpanKind::Sample, "sample", 11, at + 2 * MS, at + 6 * MS), procs);
    }
    m.span(owned(SpanKind::Collate, "collate", 11, 300 * MS, 301 * MS), procs);
    m.span(owned(SpanKind::Batch, "batch 0", 11, 0, 301 * MS), procs);
    m.span(owned(SpanKind::Wait, "wait", 10, 0, 302 * MS), procs);
    Span got = owned(SpanKind::Consumed, "consumed", 10, 302 * MS, 302 * MS);
    got.args = {{"batch", int64_t{0}}, {"delay_ms", model::DurationNs{MS}}, {"out_of_order", true}};
    m.span(got, procs);
    m.span(owned(SpanKind::Native, "memcpy", 11, 0, 1), procs); // (not a metric)
    std::string text = exposition(*reg);
    const std::string who = "dataloader=\"0\",local_rank=\"1\",node=\"node-a\",rank=\"1\"";
    // (labels in name order: op between node and rank)
    auto op = [](const std::string& family, const std::string& name, const std::string& more = "") {
        return family + "{dataloader=\"0\",local_rank=\"1\",node=\"node-a\",op=\"" + name + "\",rank=\"1\"" + more + "}";
    };
    EXPECT_EQ(value(text, "lotus_samples_total{" + who + ",worker=\"0\"}"), 3) << text;
    EXPECT_EQ(value(text, op("lotus_op_duration_seconds_count", "ToTensor")), 3);
    EXPECT_NEAR(value(text, op("lotus_op_duration_seconds_sum", "ToTensor")), 0.009, 1e-12);
    // A container's op goes by the summary's row name; 3 ms falls in the 5 ms bucket, not the 2.5 ms one.
    EXPECT_EQ(value(text, op("lotus_op_duration_seconds_count", "ColorJitter (in RandomApply)")), 3);
    EXPECT_EQ(value(text, op("lotus_op_duration_seconds_bucket", "ToTensor", ",le=\"0.0025\"")), 0);
    EXPECT_EQ(value(text, op("lotus_op_duration_seconds_bucket", "ToTensor", ",le=\"0.005\"")), 3);
    EXPECT_EQ(value(text, "lotus_load_duration_seconds_count{" + who + "}"), 3);
    EXPECT_EQ(value(text, "lotus_collate_duration_seconds_count{" + who + "}"), 1);
    EXPECT_EQ(value(text, "lotus_batch_preparation_duration_seconds_count{" + who + ",worker=\"0\"}"), 1);
    EXPECT_NEAR(value(text, "lotus_wait_duration_seconds_sum{" + who + "}"), 0.302, 1e-12);
    EXPECT_EQ(value(text, "lotus_batches_consumed_total{" + who + "}"), 1);
    EXPECT_EQ(value(text, "lotus_batches_out_of_order_total{" + who + "}"), 1);
    EXPECT_NEAR(value(text, "lotus_batch_delay_seconds_sum{" + who + "}"), 0.001, 1e-12);
    EXPECT_EQ(text.find("memcpy"), std::string::npos);
    EXPECT_EQ(text.find("4242"), std::string::npos); // no pid in any series before the info series exists
}

TEST(PipelineMetrics, BucketsResolveTenMicrosecondsToTenSeconds)
{
    const auto& b = metrics::duration_buckets();
    ASSERT_FALSE(b.empty());
    EXPECT_DOUBLE_EQ(b.front(), 1e-5);
    EXPECT_DOUBLE_EQ(b.back(), 10);
    for (size_t i = 1; i < b.size(); i++)
        EXPECT_LT(b[i - 1], b[i]);
}

TEST(PipelineMetrics, CpuPerRoleAddsUpMemoryIsTheLastReadingAndEndedRolesReadZero)
{
    auto reg = std::make_shared<metrics::SharedRegistry>();
    metrics::PipelineMetrics m(reg, {"n", "0.1.0", "3.11.2", 4242, {{"job", "train"}}});
    auto procs = ranked_job();
    model::UsagePoint p{};
    p.pid = 11;
    p.interval_s = 0.5;
    p.user_pct = 80; // 0.4 s
    p.system_pct = 20; // 0.1 s
    p.rss_mb = 100;
    m.usage(p, procs);
    m.usage(p, procs);
    m.refresh(procs);
    std::string text = exposition(*reg);
    const std::string worker = "job=\"train\",local_rank=\"1\",node=\"n\",rank=\"1\",role=\"worker\",worker=\"0\"";
    EXPECT_NEAR(value(text, "lotus_cpu_seconds_total{" + worker + "}"), 1.0, 1e-12) << text;
    EXPECT_EQ(value(text, "lotus_resident_memory_bytes{" + worker + "}"), 100.0 * 1024 * 1024);
    EXPECT_EQ(value(text, "lotus_processes{" + worker + "}"), 1);
    // The info series: one per training process, with the job's pid, its ranks and world size.
    EXPECT_EQ(value(text, "lotus_job_info{job=\"train\",local_rank=\"1\",node=\"n\",pid=\"4242\",python=\"3.11.2\","
                          "rank=\"1\",version=\"0.1.0\",world_size=\"4\"}"),
              1);
    procs[11].exited = true;
    m.refresh(procs);
    text = exposition(*reg);
    EXPECT_EQ(value(text, "lotus_resident_memory_bytes{" + worker + "}"), 0);
    EXPECT_EQ(value(text, "lotus_processes{" + worker + "}"), 0);
    EXPECT_NEAR(value(text, "lotus_cpu_seconds_total{" + worker + "}"), 1.0, 1e-12); // a counter never goes back
}

TEST(PipelineMetrics, AWorkersCpuBeforeItsIdIsKnownGoesToItsIdOnceItIs)
{
    auto reg = std::make_shared<metrics::SharedRegistry>();
    metrics::PipelineMetrics m(reg, {"n", "0.1.0", "3.11.2", 4242, {{"job", "train"}}});
    auto procs = ranked_job();
    procs[11].worker_id = -1; // (it read its first task; the walk that finds its id is still to come)
    model::UsagePoint p{};
    p.pid = 11;
    p.interval_s = 0.5;
    p.user_pct = 10; // 0.05 s
    m.usage(p, procs);
    std::string text = exposition(*reg);
    EXPECT_EQ(text.find("worker=\"?\""), std::string::npos) << text;
    procs[11].worker_id = 0;
    m.usage(p, procs);
    text = exposition(*reg);
    const std::string worker = "job=\"train\",local_rank=\"1\",node=\"n\",rank=\"1\",role=\"worker\",worker=\"0\"";
    EXPECT_NEAR(value(text, "lotus_cpu_seconds_total{" + worker + "}"), 0.1, 1e-12) << text;
    // One whose id never came is counted under "?" at its exit's reading.
    procs[12] = procs[11];
    procs[12].pid = 12;
    procs[12].worker_id = -1;
    p.pid = 12;
    m.usage(p, procs);
    procs[12].exited = true;
    m.usage(p, procs);
    text = exposition(*reg);
    EXPECT_NEAR(value(text, "lotus_cpu_seconds_total{job=\"train\",local_rank=\"1\",node=\"n\",rank=\"1\","
                            "role=\"worker\",worker=\"?\"}"), 0.1, 1e-12) << text;
}

TEST(PipelineMetrics, AnInfoSeriesWhoseRanksChangedIsReplaced)
{
    auto reg = std::make_shared<metrics::SharedRegistry>();
    metrics::PipelineMetrics m(reg, {"n", "v", "3.11.2", 7, {}});
    std::map<uint32_t, model::ProcessInfo> procs;
    procs[7].pid = 7;
    procs[7].root = true;
    m.refresh(procs); // no training process yet: the job's own series
    EXPECT_EQ(value(exposition(*reg), "lotus_job_info{node=\"n\",pid=\"7\",python=\"3.11.2\",version=\"v\"}"), 1);
    procs[7].consumer = true;
    procs[7].rank = 2; // torch.multiprocessing.spawn's index: local, so not "rank"
    m.refresh(procs);
    std::string text = exposition(*reg);
    EXPECT_EQ(value(text, "lotus_job_info{node=\"n\",pid=\"7\",python=\"3.11.2\",version=\"v\"}"), -1) << text;
    EXPECT_EQ(value(text, "lotus_job_info{local_rank=\"2\",node=\"n\",pid=\"7\",python=\"3.11.2\",version=\"v\"}"), 1);
}

TEST(PipelineMetrics, CaptureCountsFollowTheProbesTotals)
{
    auto reg = std::make_shared<metrics::SharedRegistry>();
    metrics::PipelineMetrics m(reg, {"n", "v", "3.11.2", 7, {}});
    m.capture({100, 0, {{"depth_over_64", 0}}});
    m.capture({250, 3, {{"depth_over_64", 2}}});
    std::string text = exposition(*reg);
    EXPECT_EQ(value(text, "lotus_events_total{node=\"n\"}"), 250);
    EXPECT_EQ(value(text, "lotus_events_lost_total{node=\"n\"}"), 3);
    EXPECT_EQ(value(text, "lotus_bpf_failures_total{failure=\"depth_over_64\",node=\"n\"}"), 2);
}

TEST(PipelineMetrics, OneOfTwoOwnersOfEqualLabelsEndingLeavesTheOthersSeries)
{
    // Two jobs the agent could not tell apart (equal labels, even the pid): prometheus-cpp gives both the same
    // metric objects. The first one's end must not free them while the second still writes and is scraped.
    auto reg = std::make_shared<metrics::SharedRegistry>();
    metrics::JobIdentity id{"n", "v", "3.11.2", 7, {{"lotus_job", "train.py"}, {"lotus_job_id", "42"}}};
    auto first = std::make_unique<metrics::PipelineMetrics>(reg, id);
    metrics::PipelineMetrics second(reg, id);
    auto procs = ranked_job();
    model::UsagePoint p{};
    p.pid = 11;
    p.interval_s = 1;
    p.user_pct = 50;
    p.rss_mb = 1;
    for (auto* m : {first.get(), &second}) {
        m->span(owned(SpanKind::Sample, "sample", 11, 0, MS), procs);
        m->span(owned(SpanKind::Op, "ToTensor", 11, 0, MS), procs);
        m->usage(p, procs);
        m->refresh(procs);
        m->capture({10, 0, {}});
    }
    // (labels in name order: local_rank before lotus_job)
    const std::string who = "local_rank=\"1\",lotus_job=\"train.py\",lotus_job_id=\"42\",node=\"n\",rank=\"1\"";
    const std::string samples = "lotus_samples_total{dataloader=\"0\"," + who + ",worker=\"0\"}";
    const std::string op = "lotus_op_duration_seconds_count{dataloader=\"0\",local_rank=\"1\",lotus_job=\"train.py\","
                           "lotus_job_id=\"42\",node=\"n\",op=\"ToTensor\",rank=\"1\"}";
    const std::string rss = "lotus_resident_memory_bytes{" + who + ",role=\"worker\",worker=\"0\"}";
    const std::string info = "lotus_job_info{local_rank=\"1\",lotus_job=\"train.py\",lotus_job_id=\"42\",node=\"n\","
                             "pid=\"7\",python=\"3.11.2\",rank=\"1\",version=\"v\",world_size=\"4\"}";
    std::string text = exposition(*reg);
    ASSERT_EQ(value(text, samples), 2) << text; // one series, both jobs' counts
    first->remove_series();
    first.reset();
    for (int i = 0; i < 3; i++) // (freed objects here: ASan's heap-use-after-free, or garbage read back)
        second.span(owned(SpanKind::Sample, "sample", 11, 0, MS), procs);
    second.span(owned(SpanKind::Op, "ToTensor", 11, 0, MS), procs);
    second.usage(p, procs);
    second.refresh(procs);
    second.capture({20, 0, {}});
    text = exposition(*reg);
    EXPECT_EQ(value(text, samples), 5) << text;
    EXPECT_EQ(value(text, op), 3);
    EXPECT_EQ(value(text, rss), 1024 * 1024);
    EXPECT_EQ(value(text, info), 1);
    EXPECT_EQ(value(text, "lotus_events_total{lotus_job=\"train.py\",lotus_job_id=\"42\",node=\"n\"}"), 30);
    // The last owner's end takes them out.
    second.remove_series();
    text = exposition(*reg);
    EXPECT_EQ(value(text, samples), -1) << text;
    EXPECT_EQ(value(text, info), -1);
    EXPECT_EQ(text.find("train.py"), std::string::npos) << text;
}

TEST(PipelineMetrics, LabelValuesAreValidUtf8WithoutControlsAndBounded)
{
    const std::string bad = "../x\xff\x1b]0;x\x07";
    EXPECT_EQ(metrics::label_value(bad), "../x\uFFFD\uFFFD]0;x\uFFFD");
    EXPECT_EQ(metrics::label_value("Résumé ✓"), "Résumé ✓"); // valid text passes unchanged
    std::string long_one(100, 'a');
    long_one += std::string(20, '\xff'); // 20 replacements of 3 bytes: past the bound
    std::string v = metrics::label_value(long_one);
    EXPECT_LE(v.size(), metrics::kMaxLabelBytes);
    EXPECT_EQ(v.substr(v.size() - 3), "\u2026"); // cut, and said so
    EXPECT_EQ(metrics::label_value(v.substr(0, v.size() - 3)), v.substr(0, v.size() - 3)); // at a character
    EXPECT_EQ(metrics::label_value(std::string(metrics::kMaxLabelBytes, 'b')), std::string(metrics::kMaxLabelBytes, 'b'));
    // In the exposition: the job's labels and a class name from the target, cleaned.
    auto reg = std::make_shared<metrics::SharedRegistry>();
    metrics::PipelineMetrics m(reg, {"n", "v", "3.11.2", 7, {{"lotus_job", bad}, {"lotus_job_id", "\xff"}}});
    m.span(owned(SpanKind::Op, "Evil\x1b[2J", 11, 0, MS), ranked_job());
    std::string text = exposition(*reg);
    EXPECT_NE(text.find("lotus_job=\"../x\uFFFD\uFFFD]0;x\uFFFD\",lotus_job_id=\"\uFFFD\""), std::string::npos) << text;
    EXPECT_NE(text.find("op=\"Evil\uFFFD[2J\""), std::string::npos) << text;
    EXPECT_EQ(text.find('\x1b'), std::string::npos);
    EXPECT_EQ(text.find('\xff'), std::string::npos);
}

TEST(BindAddress, HostAndPortAsMetricsTakesThem)
{
    auto a = metrics::parse_bind_address(":9464");
    EXPECT_EQ(a.host, "127.0.0.1");
    EXPECT_EQ(a.port, 9464);
    EXPECT_EQ(metrics::parse_bind_address("0.0.0.0:80").civetweb(), "0.0.0.0:80");
    EXPECT_EQ(metrics::parse_bind_address("[::1]:9464").civetweb(), "[::1]:9464");
    EXPECT_EQ(metrics::parse_bind_address("localhost:1").host, "127.0.0.1");
    for (const char* bad : {"9464", "host:9464", "::1:9464", "1.2.3.4:", "1.2.3.4:70000", "1.2.3.4:-1", ":x"})
        EXPECT_THROW(metrics::parse_bind_address(bad), std::invalid_argument) << bad;
}

TEST(Endpoint, APortInUseIsOneLineBeforeAnythingStarts)
{
    auto reg = std::make_shared<metrics::SharedRegistry>();
    metrics::Endpoint first(metrics::parse_bind_address("127.0.0.1:0"), reg);
    ASSERT_GT(first.port(), 0);
    try {
        metrics::Endpoint second(metrics::parse_bind_address("127.0.0.1:" + std::to_string(first.port())), reg);
        FAIL() << "bound twice";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("Address already in use"), std::string::npos) << e.what();
        EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
}

TEST(PipelineMetrics, OpAndFunctionNamesPastTheBoundAreOneOtherSeriesAndCounted)
{
    // A target's class and function names are its own choice: a job with more distinct names than the bound
    // (a pipeline that makes classes on the fly) must not grow the node's series without end.
    auto reg = std::make_shared<metrics::SharedRegistry>();
    metrics::PipelineMetrics m(reg, {"n", "v", "3.11.2", 7, {{"lotus_job", "train.py"}}});
    auto procs = ranked_job();
    const size_t extra = 6;
    for (int round = 0; round < 2; round++) { // (a name seen again: its own series or "other", folded once)
        for (size_t i = 0; i < metrics::kMaxOpsPerJob + extra; i++)
            m.span(owned(SpanKind::Op, fmt::format("Op{}", i), 11, 0, MS), procs);
        for (size_t i = 0; i < metrics::kMaxFunctionsPerJob + 1; i++)
            m.span(owned(SpanKind::Py, fmt::format("f{}", i), 11, 0, MS), procs);
    }
    std::string text = exposition(*reg);
    auto series_of = [&](const std::string& prefix) {
        size_t n = 0;
        std::istringstream in(text);
        for (std::string line; std::getline(in, line);)
            n += line.rfind(prefix, 0) == 0;
        return n;
    };
    EXPECT_EQ(series_of("lotus_op_duration_seconds_count{"), metrics::kMaxOpsPerJob + 1) << text;
    EXPECT_EQ(series_of("lotus_function_duration_seconds_count{"), metrics::kMaxFunctionsPerJob + 1);
    const std::string where = "dataloader=\"0\",local_rank=\"1\",lotus_job=\"train.py\",node=\"n\",";
    // The first names seen keep their series; the rest add up in "other".
    EXPECT_EQ(value(text, "lotus_op_duration_seconds_count{" + where + "op=\"Op0\",rank=\"1\"}"), 2);
    EXPECT_EQ(value(text, "lotus_op_duration_seconds_count{" + where + fmt::format("op=\"Op{}\",rank=\"1\"}}",
                                                                                   metrics::kMaxOpsPerJob - 1)), 2);
    EXPECT_EQ(value(text, "lotus_op_duration_seconds_count{" + where + "op=\"other\",rank=\"1\"}"), 2 * extra);
    EXPECT_EQ(value(text, "lotus_function_duration_seconds_count{dataloader=\"0\",function=\"other\",local_rank=\"1\","
                          "lotus_job=\"train.py\",node=\"n\",rank=\"1\"}"), 2);
    EXPECT_EQ(value(text, "lotus_label_values_folded_total{label=\"op\",lotus_job=\"train.py\",node=\"n\"}"), extra);
    EXPECT_EQ(value(text, "lotus_label_values_folded_total{label=\"function\",lotus_job=\"train.py\",node=\"n\"}"), 1);
    // Another job has a bound of its own.
    metrics::PipelineMetrics other(reg, {"n", "v", "3.11.2", 8, {{"lotus_job", "eval.py"}}});
    other.span(owned(SpanKind::Op, "Op70", 11, 0, MS), procs);
    text = exposition(*reg);
    EXPECT_EQ(value(text, "lotus_op_duration_seconds_count{dataloader=\"0\",local_rank=\"1\",lotus_job=\"eval.py\","
                          "node=\"n\",op=\"Op70\",rank=\"1\"}"), 1) << text;
    // Its last owner's end takes the folded count out too.
    m.remove_series();
    EXPECT_EQ(exposition(*reg).find("lotus_label_values_folded_total{label=\"op\",lotus_job=\"train.py\""),
              std::string::npos);
}

TEST(AgentMetrics, EveryReasonIsASeriesFromTheStartAndCountsItsSkips)
{
    prometheus::Registry reg;
    metrics::AgentMetrics m(reg, "node-a");
    std::string text = exposition(reg);
    for (const char* r : {"user", "cgroup", "max_jobs", "fds"})
        EXPECT_EQ(value(text, fmt::format("lotus_agent_jobs_skipped_total{{node=\"node-a\",reason=\"{}\"}}", r)), 0)
            << text;
    m.skipped(metrics::SkipReason::max_jobs);
    m.skipped(metrics::SkipReason::max_jobs);
    m.skipped(metrics::SkipReason::user);
    m.traced_now(3);
    text = exposition(reg);
    EXPECT_EQ(value(text, "lotus_agent_jobs_skipped_total{node=\"node-a\",reason=\"max_jobs\"}"), 2) << text;
    EXPECT_EQ(value(text, "lotus_agent_jobs_skipped_total{node=\"node-a\",reason=\"user\"}"), 1);
    EXPECT_EQ(value(text, "lotus_agent_jobs_skipped_total{node=\"node-a\",reason=\"fds\"}"), 0);
    EXPECT_EQ(value(text, "lotus_agent_jobs{node=\"node-a\"}"), 3);
}
