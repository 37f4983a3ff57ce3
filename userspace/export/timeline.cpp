#include "timeline.h"

#include <algorithm>

namespace lotus::exporter {

void Timeline::halve(std::vector<uint64_t>& v, bool highest)
{
    for (size_t i = 0; i < v.size(); i++)
        v[i / 2] = i % 2 == 0 ? v[i] : highest ? std::max(v[i / 2], v[i]) : v[i / 2] + v[i];
    v.resize((v.size() + 1) / 2);
}

void Timeline::grow(size_t bin)
{
    while (bin >= kMaxBins) {
        width_ *= 2;
        bin /= 2;
        bins_ = (bins_ + 1) / 2;
        for (auto* m : {&busy_, &wait_, &cpu_})
            for (auto& [pid, v] : *m)
                halve(v);
        for (auto& [pid, v] : rss_)
            halve(v, true);
        halve(samples_);
    }
}

void Timeline::cover(std::vector<uint64_t>& bins, uint64_t start, uint64_t end)
{
    size_t last = end ? static_cast<size_t>((end - 1) / width_) : 0;
    if (bins.size() <= last)
        bins.resize(last + 1, 0);
    for (size_t b = static_cast<size_t>(start / width_); b <= last && start < end; b++) {
        uint64_t bin_end = (b + 1) * width_;
        uint64_t upto = std::min(end, bin_end);
        bins[b] += upto - start;
        start = upto;
    }
}

void Timeline::usage(const model::UsagePoint& p)
{
    uint64_t end = p.ts_ns > t0_ ? p.ts_ns - t0_ : 0;
    uint64_t len = static_cast<uint64_t>(p.interval_s * 1e9), start = end > len ? end - len : 0;
    if (end <= start)
        return;
    size_t last = static_cast<size_t>((end - 1) / width_);
    grow(last);
    last = static_cast<size_t>((end - 1) / width_);
    end_ = std::max(end_, end);
    bins_ = std::max(bins_, last + 1);
    // CPU time over the interval, spread evenly: each bin gets its share of the overlap
    double cpu_ns = (p.user_pct + p.system_pct) / 100 * static_cast<double>(end - start);
    std::vector<uint64_t> covered;
    cover(covered, start, end);
    auto& cpu = cpu_[p.pid];
    auto& rss = rss_[p.pid];
    if (cpu.size() < covered.size())
        cpu.resize(covered.size(), 0);
    if (rss.size() < covered.size())
        rss.resize(covered.size(), 0);
    for (size_t b = static_cast<size_t>(start / width_); b < covered.size(); b++) {
        cpu[b] += static_cast<uint64_t>(cpu_ns * static_cast<double>(covered[b]) / static_cast<double>(end - start));
        rss[b] = std::max(rss[b], static_cast<uint64_t>(p.rss_mb * 1024));
    }
}

void Timeline::add(const model::Span& s)
{
    using K = model::SpanKind;
    if (s.kind != K::Batch && s.kind != K::Wait && s.kind != K::Sample)
        return;
    // Before the run's start (a batch begun before tracing): only its part after t0 counts.
    uint64_t start = s.start_ns > t0_ ? s.start_ns - t0_ : 0, end = s.end_ns > t0_ ? s.end_ns - t0_ : 0;
    if (end < start)
        return;
    end_ = std::max(end_, end);
    grow(end ? static_cast<size_t>((end - 1) / width_) : 0);
    bins_ = std::max(bins_, static_cast<size_t>(end ? (end - 1) / width_ : 0) + 1);
    if (s.kind == K::Sample) {
        size_t b = static_cast<size_t>(end ? (end - 1) / width_ : 0);
        if (samples_.size() <= b)
            samples_.resize(b + 1, 0);
        samples_[b]++;
        return;
    }
    cover(s.kind == K::Batch ? busy_[s.pid] : wait_[s.pid], start, end);
}

} // namespace lotus::exporter
