#include "timeline.h"

#include <algorithm>

namespace lotus::exporter {

void Timeline::halve(Bins& b, bool highest)
{
    if (b.v.empty()) {
        b.first /= 2;
        return;
    }
    size_t first = b.first / 2, end = (b.end() + 1) / 2;
    std::vector<uint64_t> v(end - first, 0);
    for (size_t i = 0; i < b.v.size(); i++) {
        uint64_t& to = v[(b.first + i) / 2 - first];
        to = highest ? std::max(to, b.v[i]) : to + b.v[i];
    }
    b.first = first;
    b.v = std::move(v);
}

void Timeline::grow(size_t bin)
{
    while (bin >= kMaxBins) {
        width_ *= 2;
        bin /= 2;
        bins_ = (bins_ + 1) / 2;
        for (auto* m : {&busy_, &wait_, &cpu_, &alive_})
            for (auto& [pid, b] : *m)
                halve(b);
        for (auto& [pid, b] : rss_)
            halve(b, true);
        Bins s{0, std::move(samples_)};
        halve(s);
        samples_ = std::move(s.v);
    }
}

// b extended to hold bins from..last.
static void extend(Bins& b, size_t from, size_t last)
{
    if (b.v.empty()) {
        b.first = from;
    } else if (from < b.first) {
        b.v.insert(b.v.begin(), b.first - from, 0);
        b.first = from;
    }
    if (b.end() <= last)
        b.v.resize(last + 1 - b.first, 0);
}

// Adds [start, end) to the bins it overlaps.
void Timeline::cover(Bins& b, uint64_t start, uint64_t end)
{
    if (start >= end)
        return;
    size_t from = static_cast<size_t>(start / width_), last = static_cast<size_t>((end - 1) / width_);
    extend(b, from, last);
    for (size_t i = from; i <= last && start < end; i++) {
        uint64_t upto = std::min(end, (i + 1) * width_);
        b.v[i - b.first] += upto - start;
        start = upto;
    }
}

void Timeline::fold(uint32_t pid, uint32_t into, uint64_t first_ns, uint64_t last_ns)
{
    auto join = [&](std::map<uint32_t, Bins>& m, bool highest) {
        auto from = m.find(pid);
        if (from == m.end())
            return;
        if (!from->second.v.empty()) {
            Bins& to = m[into];
            extend(to, from->second.first, from->second.end() - 1);
            for (size_t i = 0; i < from->second.v.size(); i++) {
                uint64_t& b = to.v[from->second.first + i - to.first];
                b = highest ? std::max(b, from->second.v[i]) : b + from->second.v[i];
            }
        }
        m.erase(pid);
    };
    for (auto* m : {&busy_, &wait_, &cpu_, &alive_, &rss_}) // (a role's RSS lines sum its processes per bin)
        join(*m, false);
    uint64_t start = first_ns > t0_ ? first_ns - t0_ : 0, end = last_ns > t0_ ? last_ns - t0_ : 0;
    if (end > start) {
        grow(static_cast<size_t>((end - 1) / width_));
        cover(alive_[into], start, end);
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
    Bins covered;
    cover(covered, start, end);
    Bins& cpu = cpu_[p.pid];
    Bins& rss = rss_[p.pid];
    extend(cpu, covered.first, covered.end() - 1);
    extend(rss, covered.first, covered.end() - 1);
    for (size_t b = covered.first; b < covered.end(); b++) {
        cpu.v[b - cpu.first] +=
            static_cast<uint64_t>(cpu_ns * static_cast<double>(covered.at(b)) / static_cast<double>(end - start));
        uint64_t& r = rss.v[b - rss.first];
        r = std::max(r, static_cast<uint64_t>(p.rss_mb * 1024));
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
