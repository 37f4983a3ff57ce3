// The workers model (export/worker_model.h): its inputs gathered from spans, readings and the host's CPU, and its
// curve from them.
#include <gtest/gtest.h>

#include "export/worker_model.h"

namespace lotus {
namespace {

using model::Span;
using model::SpanKind;
constexpr uint32_t P = 10, W0 = 11, W1 = 12;
// Times in units of 4 ms (the loop's readings must span 0.5 s or more to be used); u: one unit in seconds.
constexpr uint64_t kMs = 4'000'000, T0 = 1'000 * kMs;
constexpr double u = 0.004;

// Two passes (epochs 0 and 1) of 100 units, 10 apart; in each, 5 rounds of a 20-unit batch of 10 samples in each
// of the two workers; every sample 2 units, 1 of them on a CPU, never blocking; the loop waits 5 units for each of
// its 20 batches, the first wait from the first pass's start, the last up to the second's end. With usage:
// readings every 50 units (the training process using 0.4 CPU, each worker 0.9), and the host's CPUs busy 0.5 CPU more.
struct Job {
    exporter::ModelFigures figures;
    std::vector<std::pair<uint64_t, std::function<void()>>> events; // by time: spans at their end

    Span span(SpanKind k, uint32_t pid, uint64_t start, uint64_t end)
    {
        Span s = Span::make(k, "x", pid, pid, start, end);
        s.owner = P;
        s.loader = 0;
        return s;
    }
    void build(bool readings)
    {
        for (int pass = 0; pass < 2; pass++) {
            uint64_t p0 = T0 + static_cast<uint64_t>(pass) * 110 * kMs;
            for (int round = 0; round < 5; round++)
                for (uint32_t w : {W0, W1}) {
                    uint64_t b0 = p0 + static_cast<uint64_t>(round) * 20 * kMs;
                    for (int i = 0; i < 10; i++) {
                        Span s = span(SpanKind::Sample, w, b0 + static_cast<uint64_t>(i) * 2 * kMs,
                                      b0 + static_cast<uint64_t>(i + 1) * 2 * kMs);
                        s.has_counters = true;
                        s.counters.cpu_ns = kMs;
                        events.push_back({s.end_ns, [this, s] { figures.add(s); }});
                    }
                    Span b = span(SpanKind::Batch, w, b0, b0 + 20 * kMs);
                    b.args = {{"epoch", int64_t{pass}}, {"worker", int64_t{w == W0 ? 0 : 1}}, {"samples", int64_t{10}}};
                    events.push_back({b.end_ns, [this, b] { figures.add(b); }});
                }
        }
        for (int i = 0; i < 20; i++) { // waits: the first from T0, the last ending at T0 + 210 units
            uint64_t start = i == 19 ? T0 + 205 * kMs : T0 + static_cast<uint64_t>(i) * 10 * kMs;
            Span w = span(SpanKind::Wait, P, start, start + 5 * kMs);
            events.push_back({w.end_ns, [this, w] { figures.add(w); }});
        }
        for (uint64_t t = T0 - 100 * kMs; readings && t <= T0 + 300 * kMs; t += 50 * kMs) {
            for (auto [pid, pct] : {std::pair{P, 40.0}, {W0, 90.0}, {W1, 90.0}})
                events.push_back({t, [this, pid, pct, t] {
                                      model::UsagePoint r;
                                      r.pid = pid;
                                      r.ts_ns = t;
                                      r.interval_s = 50 * u;
                                      r.user_pct = pct;
                                      figures.usage(r);
                                  }});
            events.push_back({t, [this, t] {
                                  model::RecordHostCpu h{model::kRecordHostCpu, P, 0, 0, t, 0, 0, 0, 4, 0};
                                  // 2.7 CPUs busy, and 0.6 more at a lower priority (not counted: it yields)
                                  h.nice_ns = static_cast<uint64_t>(static_cast<double>(t - (T0 - 100 * kMs)) * 0.6);
                                  h.busy_ns = static_cast<uint64_t>(static_cast<double>(t - (T0 - 100 * kMs)) * 2.7) +
                                              h.nice_ns;
                                  h.total_ns = (t - (T0 - 100 * kMs)) * 4;
                                  figures.host(h);
                              }});
        }
        std::stable_sort(events.begin(), events.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
        for (auto& [t, f] : events)
            f();
    }
};

TEST(WorkerModel, InputsFromSpans)
{
    Job job;
    job.build(false);
    std::map<uint32_t, model::ProcessInfo> processes;
    auto in = job.figures.inputs(P, 2, processes, nullptr);
    ASSERT_TRUE(in);
    EXPECT_EQ(in->workers, 2u);
    EXPECT_EQ(in->samples, 200u);
    EXPECT_EQ(in->passes, 2u);
    EXPECT_NEAR(in->seconds, 210 * u, 1e-9);
    EXPECT_NEAR(in->first_batch_s, 40 * u, 1e-9);
    EXPECT_EQ(in->first_samples, 20u);
    EXPECT_NEAR(in->gaps_s, 10 * u, 1e-9);
    EXPECT_NEAR(in->on_cpu_share, 0.5, 1e-9);
    // batches 0.4 s, half of it on a CPU, over 200 samples
    EXPECT_NEAR(in->worker_cpu_s, u, 1e-9);
    EXPECT_NEAR(in->worker_s, u, 1e-9);
    EXPECT_FALSE(in->worker_cpu_read);
    // the loop: 210 ms less 100 ms of waits over 200 samples; its CPU not read: its time taken as its CPU, half of
    // which (the workers' share) it waited for one
    EXPECT_FALSE(in->main_cpu_read);
    EXPECT_NEAR(in->main_cpu_s, 0.55 * u, 1e-9);
    EXPECT_NEAR(in->loop_s, 0.275 * u, 1e-9);
    EXPECT_LT(in->others_cpus, 0); // no host readings
    EXPECT_FALSE(job.figures.inputs(W0, 2, processes, nullptr)); // no loop of its
}

TEST(WorkerModel, Curve)
{
    Job job;
    job.build(false);
    std::map<uint32_t, model::ProcessInfo> processes;
    auto m = exporter::worker_model(*job.figures.inputs(P, 2, processes, nullptr), 4);
    ASSERT_EQ(m.curve.size(), 4u);
    EXPECT_NEAR(m.measured_per_s, 200 / (210 * u), 1e-6);
    // 1 worker: 1 unit per sample; first batches 40 units (10 samples per pass), gaps 10
    EXPECT_EQ(m.curve[0].bound, exporter::Bound::Workers);
    EXPECT_NEAR(m.curve[0].samples_per_s, 200 / (40 * u + 180 * u + 10 * u), 1e-6);
    // 2: the CPUs, 2 / (1 + 0.55 units); first batches 20 samples per pass
    double cpu_bound = 2 / (1.55 * u);
    EXPECT_EQ(m.curve[1].bound, exporter::Bound::Cpus);
    EXPECT_NEAR(m.curve[1].steady_per_s, cpu_bound, 1e-6);
    EXPECT_NEAR(m.curve[1].samples_per_s, 200 / (40 * u + 160 / cpu_bound + 10 * u), 1e-6);
    // 3: the same bound, their starts crowded 1.5x on 2 CPUs
    EXPECT_NEAR(m.curve[2].samples_per_s, 200 / (60 * u + 140 / cpu_bound + 10 * u), 1e-6);
    EXPECT_EQ(m.suggested, 2u);
    ASSERT_TRUE(m.at(3));
    EXPECT_FALSE(m.at(5));
}

TEST(WorkerModel, ReadingsGiveTheCpuAndTheOthers)
{
    Job job;
    job.build(true);
    std::map<uint32_t, model::ProcessInfo> processes;
    for (uint32_t w : {W0, W1}) {
        processes[w].owner = P;
        processes[w].batches = 10;
    }
    std::map<uint32_t, model::ProcessUsage> usage;
    usage[W0].user_ns = usage[W1].user_ns = 120 * kMs; // exact at their exits: 1.2 units per sample in all
    usage[W0].readings = usage[W1].readings = 8;
    auto in = job.figures.inputs(P, 4, processes, &usage);
    ASSERT_TRUE(in);
    EXPECT_TRUE(in->worker_cpu_read);
    EXPECT_NEAR(in->worker_cpu_s, 1.2 * u, 1e-9);
    EXPECT_NEAR(in->worker_s, 1.2 * u, 1e-9);
    EXPECT_TRUE(in->main_cpu_read);
    EXPECT_NEAR(in->main_cpu_s, 0.4 * 210 * u / 200, 1e-9); // 0.4 CPU over the loop's 210 units
    EXPECT_NEAR(in->others_cpus, 0.5, 1e-9);             // 2.7 busy less the job's 2.2
    EXPECT_NEAR(in->usable_cpus(), 3.5, 1e-9);
    auto m = exporter::worker_model(*in, 8);
    EXPECT_NEAR(m.curve[7].steady_per_s, 3.5 / (1.2 * u + 0.4 * 210 * u / 200), 1e-6);
}

} // namespace
} // namespace lotus
