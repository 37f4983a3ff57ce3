#include "summary.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <numeric>

namespace lotus::exporter {

double percentile(const std::vector<uint64_t>& sorted, double q)
{
    if (sorted.empty())
        return 0;
    size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size())));
    rank = std::clamp<size_t>(rank, 1, sorted.size());
    return static_cast<double>(sorted[rank - 1]);
}

DurationStats stats_of(std::vector<uint64_t> d)
{
    DurationStats s;
    if (d.empty())
        return s;
    std::sort(d.begin(), d.end());
    double total = std::accumulate(d.begin(), d.end(), 0.0);
    s.count = d.size();
    s.total_ms = total / 1e6;
    s.mean_ms = total / static_cast<double>(d.size()) / 1e6;
    s.p50_ms = percentile(d, 0.50) / 1e6;
    s.p95_ms = percentile(d, 0.95) / 1e6;
    s.p99_ms = percentile(d, 0.99) / 1e6;
    return s;
}

void Summary::add(const model::Span& s)
{
    uint64_t dur = s.end_ns > s.start_ns ? s.end_ns - s.start_ns : 0;
    if (s.kind == model::SpanKind::Sample) {
        samples_.push_back(dur);
        return;
    }
    auto [it, fresh] = durations_.try_emplace(s.name);
    if (fresh)
        order_.push_back(s.name);
    it->second.push_back(dur);
}

std::vector<std::pair<std::string, DurationStats>> Summary::rows() const
{
    std::vector<std::pair<std::string, DurationStats>> out;
    for (const auto& name : order_)
        out.emplace_back(name, stats_of(durations_.at(name)));
    if (!samples_.empty())
        out.emplace_back("sample", stats_of(samples_));
    return out;
}

void Summary::print(FILE* out, const std::map<uint32_t, model::ProcessInfo>& processes,
                    const std::vector<std::string>& notes) const
{
    auto r = rows();
    if (r.empty()) {
        fmt::print(out, "No pipeline was seen: no Compose-like call ran in the traced processes.\n");
    } else {
        fmt::print(out, "{:<28} {:>8} {:>10} {:>10} {:>10} {:>10} {:>12}\n", "op", "count", "mean ms", "p50 ms",
                   "p95 ms", "p99 ms", "total ms");
        for (const auto& [name, s] : r)
            fmt::print(out, "{:<28} {:>8} {:>10.3f} {:>10.3f} {:>10.3f} {:>10.3f} {:>12.1f}\n",
                       name == "sample" ? "sample (whole pipeline)" : name, s.count, s.mean_ms, s.p50_ms, s.p95_ms,
                       s.p99_ms, s.total_ms);
    }
    fmt::print(out, "\n{:<14} {:>8} {:>8}\n", "process", "pid", "samples");
    for (const auto& [pid, p] : processes)
        if (p.root || p.samples > 0 || p.worker_id >= 0)
            fmt::print(out, "{:<14} {:>8} {:>8}\n", p.label(), pid, p.samples);
    for (const auto& n : notes)
        fmt::print(out, "{}\n", n);
}

} // namespace lotus::exporter
