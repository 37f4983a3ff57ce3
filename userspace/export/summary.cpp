#include "summary.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <numeric>
#include <set>

#include "common/json.h"

namespace lotus::exporter {

double percentile(const std::vector<uint64_t>& sorted, double q)
{
    if (sorted.empty())
        return 0;
    size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size())));
    rank = std::clamp<size_t>(rank, 1, sorted.size());
    return static_cast<double>(sorted[rank - 1]);
}

DurationStats stats_of(const DurationSeries& d)
{
    DurationStats s;
    if (!d.count())
        return s;
    double n = static_cast<double>(d.count());
    s.count = d.count();
    s.total_ms = d.total_ns() / 1e6;
    s.mean_ms = d.total_ns() / n / 1e6;
    s.p50_ms = d.percentile(0.50) / 1e6;
    s.p95_ms = d.percentile(0.95) / 1e6;
    s.p99_ms = d.percentile(0.99) / 1e6;
    s.p25_ms = d.percentile(0.25) / 1e6;
    s.p75_ms = d.percentile(0.75) / 1e6;
    s.min_ms = static_cast<double>(d.min_ns()) / 1e6;
    s.max_ms = static_cast<double>(d.max_ns()) / 1e6;
    double mean_ns = d.total_ns() / n;
    s.std_ms = std::sqrt(std::max(0.0, d.sum_squares_ns() / n - mean_ns * mean_ns)) / 1e6;
    return s;
}

DurationStats stats_of(const std::vector<uint64_t>& durations_ns)
{
    DurationSeries d;
    for (uint64_t v : durations_ns)
        d.add(v);
    return stats_of(d);
}

BatchSummary summarize_batches(const model::BatchStats& b, const std::map<uint32_t, model::ProcessInfo>& processes,
                               const std::vector<std::pair<std::string, DurationStats>>& op_rows)
{
    BatchSummary s;
    s.prepare = stats_of(b.prepare_ns);
    s.wait = stats_of(b.wait_ns);
    s.delay = stats_of(b.delay_ns);
    for (size_t i = 0; i < b.wait_ns.size(); i++) {
        if (b.out_of_order[i])
            s.out_of_order++;
        if (b.wait_ns[i] <= 1'000'000)
            s.wait_le_1ms++;
        else if (b.wait_ns[i] <= 500'000'000)
            s.wait_1_500ms++;
        else
            s.wait_gt_500ms++;
    }
    for (auto d : b.delay_ns)
        s.delay_gt_500ms += d > 500'000'000;
    double loop = static_cast<double>(b.loop_last_ns - b.loop_first_ns);
    s.waiting_share = loop > 0 ? s.wait.total_ms * 1e6 / loop : 0;
    std::set<int> ids; // worker ids, not processes: each epoch may fork new ones
    for (const auto& [pid, p] : processes)
        if (!p.root && p.batches > 0)
            ids.insert(p.worker_id);
    size_t workers = ids.size();
    double per_sample = 0;
    for (const auto& [name, st] : op_rows)
        if (name == "sample")
            per_sample = st.mean_ms;
    double pct = s.waiting_share * 100;
    if (s.wait.count == 0)
        s.verdict = "No DataLoader batches were consumed while tracing.";
    else if (pct >= 20)
        s.verdict = fmt::format("The training loop waited for data {:.0f} % of the time: input-bound; the data "
                                "pipeline is the bottleneck ({} worker(s) x {:.2f} ms/sample in the pipeline).",
                                pct, workers, per_sample);
    else
        s.verdict = fmt::format("The training loop waited for data {:.0f} % of the time: not input-bound; the "
                                "data pipeline keeps up.",
                                pct);
    return s;
}

void Summary::add(const model::Span& s)
{
    uint64_t dur = s.end_ns > s.start_ns ? s.end_ns - s.start_ns : 0;
    if (s.has_counters) {
        auto& c = counters_[s.kind == model::SpanKind::Sample ? std::string("sample") : s.name];
        c.cpu_ns += s.counters.cpu_ns;
        c.wall_ns += dur;
        c.minor_faults += s.counters.minor_faults;
        for (unsigned k = 0; k < model::kMaxPerfCounters; k++)
            c.perf[k] += s.counters.perf[k];
        c.count++;
    }
    if (s.kind == model::SpanKind::Sample) {
        samples_.add(dur);
        return;
    }
    if (s.kind != model::SpanKind::Op && s.kind != model::SpanKind::Loader && s.kind != model::SpanKind::Collate &&
        s.kind != model::SpanKind::Py)
        return; // batches and waits have their own section
    auto [it, fresh] = durations_.try_emplace(s.name);
    if (fresh)
        order_.push_back(s.name);
    it->second.add(dur);
}

std::vector<std::pair<std::string, DurationStats>> Summary::rows() const
{
    std::vector<std::pair<std::string, DurationStats>> out;
    for (const auto& name : order_)
        out.emplace_back(name, stats_of(durations_.at(name)));
    if (samples_.count())
        out.emplace_back("sample", stats_of(samples_));
    for (auto& [name, st] : out) {
        auto c = counters_.find(name);
        if (c == counters_.end() || !c->second.count)
            continue;
        st.cpu_ms = static_cast<double>(c->second.cpu_ns) / 1e6 / static_cast<double>(c->second.count);
        st.on_cpu_pct = c->second.wall_ns ? 100.0 * static_cast<double>(c->second.cpu_ns) / static_cast<double>(c->second.wall_ns) : 0;
        st.minor_faults = static_cast<double>(c->second.minor_faults) / static_cast<double>(c->second.count);
    }
    return out;
}

static double share(uint64_t part, uint64_t whole) { return whole ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0; }

static double busy_pct(const model::ProcessInfo& p)
{
    return p.last_ns > p.first_ns ? 100.0 * static_cast<double>(p.busy_ns) / static_cast<double>(p.last_ns - p.first_ns) : 0;
}

void Summary::print(FILE* out, const std::map<uint32_t, model::ProcessInfo>& processes, const BatchSummary* batches,
                    const std::vector<std::string>& notes) const
{
    auto r = rows();
    if (r.empty()) {
        fmt::print(out, "No pipeline was seen: no Compose-like call ran in the traced processes.\n");
    } else {
        fmt::print(out, "{:<28} {:>8} {:>10} {:>10} {:>10} {:>10} {:>12} {:>8} {:>6} {:>7}\n", "op", "count", "mean ms",
                   "p50 ms", "p95 ms", "p99 ms", "total ms", "cpu ms", "cpu %", "faults");
        for (const auto& [name, s] : r) {
            std::string cpu = s.cpu_ms < 0 ? "-" : fmt::format("{:.3f}", s.cpu_ms);
            std::string pct = s.on_cpu_pct < 0 ? "-" : fmt::format("{:.0f}", s.on_cpu_pct);
            std::string flt = s.minor_faults < 0 ? "-" : fmt::format("{:.1f}", s.minor_faults);
            fmt::print(out, "{:<28} {:>8} {:>10.3f} {:>10.3f} {:>10.3f} {:>10.3f} {:>12.1f} {:>8} {:>6} {:>7}\n",
                       name == "sample" ? "sample (whole pipeline)" : name, s.count, s.mean_ms, s.p50_ms, s.p95_ms,
                       s.p99_ms, s.total_ms, cpu, pct, flt);
        }
    }
    if (batches && (batches->prepare.count || batches->wait.count)) {
        const auto& b = *batches;
        fmt::print(out, "\nbatches prepared: {}   per batch ms: mean {:.2f}  std {:.2f} ({:.0f} %)  min {:.2f}  p25 {:.2f}  "
                        "median {:.2f}  p75 {:.2f}  max {:.2f}  IQR {:.2f}  sum {:.1f}\n",
                   b.prepare.count, b.prepare.mean_ms, b.prepare.std_ms,
                   b.prepare.mean_ms > 0 ? 100 * b.prepare.std_ms / b.prepare.mean_ms : 0, b.prepare.min_ms,
                   b.prepare.p25_ms, b.prepare.p50_ms, b.prepare.p75_ms, b.prepare.max_ms,
                   b.prepare.p75_ms - b.prepare.p25_ms, b.prepare.total_ms);
        fmt::print(out, "batches consumed: {}   wait ms: mean {:.2f}  p50 {:.2f}  p99 {:.2f}   out-of-order {:.0f} %  "
                        "<=1 ms {:.0f} %  1-500 ms {:.0f} %  >500 ms {:.0f} %\n",
                   b.wait.count, b.wait.mean_ms, b.wait.p50_ms, b.wait.p99_ms, share(b.out_of_order, b.wait.count),
                   share(b.wait_le_1ms, b.wait.count), share(b.wait_1_500ms, b.wait.count),
                   share(b.wait_gt_500ms, b.wait.count));
        fmt::print(out, "ready-to-consumed delay ms: mean {:.2f}  p50 {:.2f}  p99 {:.2f}  >500 ms {:.0f} %\n",
                   b.delay.mean_ms, b.delay.p50_ms, b.delay.p99_ms, share(b.delay_gt_500ms, b.delay.count));
        fmt::print(out, "{}\n", b.verdict);
    }
    // One row per role: a DataLoader worker id stands for every process that played it (non-persistent
    // workers are new processes each epoch); the JSON summary keeps one entry per process.
    struct Row {
        std::string pids;
        size_t processes = 0;
        uint64_t samples = 0, batches = 0, busy_ns = 0, seen_ns = 0;
    };
    std::map<std::pair<int, std::string>, Row> rows;
    for (const auto& [pid, p] : processes) {
        if (!p.root && p.samples == 0 && p.worker_id < 0)
            continue;
        auto& r = rows[{p.root ? -2 : p.worker_id < 0 ? 1 << 30 : p.worker_id, p.label()}];
        r.pids += (r.pids.empty() ? "" : ",") + std::to_string(pid);
        r.processes++;
        r.samples += p.samples;
        r.batches += p.batches;
        r.busy_ns += p.busy_ns;
        r.seen_ns += p.last_ns > p.first_ns ? p.last_ns - p.first_ns : 0;
    }
    fmt::print(out, "\n{:<14} {:>10} {:>8} {:>8} {:>7} {:>7}  pids\n", "process", "processes", "samples", "batches",
               "busy %", "idle %");
    for (const auto& [key, r] : rows) {
        std::string pids = r.pids.size() > 40 ? r.pids.substr(0, 37) + "..." : r.pids;
        if (r.batches == 0 || r.seen_ns == 0) // busy/idle are about DataLoader workers
            fmt::print(out, "{:<14} {:>10} {:>8} {:>8} {:>7} {:>7}  {}\n", key.second, r.processes, r.samples,
                       r.batches, "-", "-", pids);
        else
            fmt::print(out, "{:<14} {:>10} {:>8} {:>8} {:>7.1f} {:>7.1f}  {}\n", key.second, r.processes, r.samples,
                       r.batches, 100.0 * static_cast<double>(r.busy_ns) / static_cast<double>(r.seen_ns),
                       100.0 - 100.0 * static_cast<double>(r.busy_ns) / static_cast<double>(r.seen_ns), pids);
    }
    print_counters(out);
    print_native_map(out);
    for (const auto& n : notes)
        fmt::print(out, "{}\n", n);
}

} // namespace lotus::exporter

namespace lotus::exporter {

static std::string stats_json(const DurationStats& s)
{
    return fmt::format("{{\"count\":{},\"mean_ms\":{:.4f},\"std_ms\":{:.4f},\"min_ms\":{:.4f},\"p25_ms\":{:.4f},"
                       "\"p50_ms\":{:.4f},\"p75_ms\":{:.4f},\"p95_ms\":{:.4f},\"p99_ms\":{:.4f},\"max_ms\":{:.4f},"
                       "\"total_ms\":{:.4f}{}}}",
                       s.count, s.mean_ms, s.std_ms, s.min_ms, s.p25_ms, s.p50_ms, s.p75_ms, s.p95_ms, s.p99_ms,
                       s.max_ms, s.total_ms,
                       s.cpu_ms < 0 ? std::string()
                                    : fmt::format(",\"cpu_ms\":{:.4f},\"on_cpu_pct\":{:.2f},\"minor_faults\":{:.2f}",
                                                  s.cpu_ms, s.on_cpu_pct, s.minor_faults));
}

std::string Summary::json(const std::map<uint32_t, model::ProcessInfo>& processes, const BatchSummary* batches,
                          const std::map<std::string, std::string>& run) const
{
    std::string ops;
    for (const auto& [name, st] : rows())
        ops += fmt::format("{}{}:{}", ops.empty() ? "" : ",", json_string(name), stats_json(st));
    std::string procs;
    for (const auto& [pid, p] : processes)
        if (p.root || p.samples > 0 || p.worker_id >= 0)
            procs += fmt::format("{}{{\"pid\":{},\"label\":{},\"worker\":{},\"samples\":{},\"batches\":{},"
                                 "\"busy_pct\":{:.2f}}}",
                                 procs.empty() ? "" : ",", pid, json_string(p.label()), p.worker_id, p.samples,
                                 p.batches, p.root ? 0.0 : busy_pct(p));
    std::string b = "null";
    if (batches) {
        const auto& x = *batches;
        b = fmt::format("{{\"prepare\":{},\"wait\":{},\"delay\":{},\"wait_share\":{{\"out_of_order\":{:.4f},"
                        "\"le_1ms\":{:.4f},\"1ms_500ms\":{:.4f},\"gt_500ms\":{:.4f}}},\"delay_gt_500ms_share\":{:.4f},"
                        "\"waiting_share\":{:.4f},\"verdict\":{}}}",
                        stats_json(x.prepare), stats_json(x.wait), stats_json(x.delay),
                        share(x.out_of_order, x.wait.count) / 100, share(x.wait_le_1ms, x.wait.count) / 100,
                        share(x.wait_1_500ms, x.wait.count) / 100, share(x.wait_gt_500ms, x.wait.count) / 100,
                        share(x.delay_gt_500ms, x.delay.count) / 100, x.waiting_share, json_string(x.verdict));
    }
    std::string r;
    for (const auto& [k, v] : run)
        r += fmt::format("{}{}:{}", r.empty() ? "" : ",", json_string(k), v);
    return fmt::format("{{\"run\":{{{}}},\"ops\":{{{}}},\"batches\":{},\"processes\":[{}],\"counters\":{},"
                       "\"native_map\":{}}}\n",
                       r, ops, b, procs, counters_json(), native_map_json());
}

} // namespace lotus::exporter
