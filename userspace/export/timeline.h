// What happened over time, for the HTML report's time charts: per process, the time inside batch spans (a
// DataLoader worker busy) and inside waits (a training loop blocked in next()); samples completed by the job.
// Fixed-width bins from the run's start, the width doubled (bins merged pairwise) whenever the run outgrows
// kMaxBins, so memory stays bounded however long the run; every figure is exact for its bin. A process's figures
// are kept from its own first bin to its last (Bins), so that the DataLoader workers of many epochs, each alive
// for a few bins, cost a few bins each, not a whole run's.
#pragma once
#include <cstdint>
#include <map>
#include <vector>

#include "model/spans.h"
#include "model/usage.h"

namespace lotus::exporter {

// One process's figures per bin, from bin `first` on.
struct Bins {
    size_t first = 0;
    std::vector<uint64_t> v;
    uint64_t at(size_t bin) const { return bin >= first && bin - first < v.size() ? v[bin - first] : 0; }
    size_t end() const { return first + v.size(); } // one past its last bin
};

class Timeline {
public:
    static constexpr size_t kMaxBins = 400;
    static constexpr uint64_t kFirstWidthNs = 50'000'000; // 50 ms: a batch is visible

    explicit Timeline(uint64_t t0_ns) : t0_(t0_ns) {}
    void add(const model::Span& s);
    // A process's resource reading over one interval: its CPU time spread evenly over the interval, its RSS.
    void usage(const model::UsagePoint& p);

    uint64_t t0_ns() const { return t0_; }
    uint64_t width_ns() const { return width_; }
    size_t bins() const { return bins_; } // bins up to the last span end seen
    uint64_t end_ns() const { return end_; } // the last span end seen, relative to t0
    // Per process, ns inside batch spans (workers) and inside waits (training loops) per bin.
    const std::map<uint32_t, Bins>& busy_ns() const { return busy_; }
    const std::map<uint32_t, Bins>& wait_ns() const { return wait_; }
    const std::vector<uint64_t>& samples() const { return samples_; } // sample spans ending per bin
    const std::map<uint32_t, Bins>& cpu_ns() const { return cpu_; }   // per process, per bin
    const std::map<uint32_t, Bins>& rss_kb() const { return rss_; }   // per process, highest per bin
    // Processes folded into a role's row (Engine::FoldSink): pid's figures join into's, and the time pid was
    // alive (its first event to its last) joins into's folded_alive_ns(), since into's own first and last no
    // longer say when its role was played.
    void fold(uint32_t pid, uint32_t into, uint64_t first_ns, uint64_t last_ns);
    const std::map<uint32_t, Bins>& folded_alive_ns() const { return alive_; }

private:
    void cover(Bins& bins, uint64_t start_ns, uint64_t end_ns); // relative to t0
    void grow(size_t bin);                                       // widening while it is too far
    static void halve(Bins& b, bool highest = false);            // sums (or keeps the highest of) pairs
    uint64_t t0_, width_ = kFirstWidthNs;
    size_t bins_ = 0;
    uint64_t end_ = 0;
    std::map<uint32_t, Bins> busy_, wait_, cpu_, rss_, alive_;
    std::vector<uint64_t> samples_;
};

} // namespace lotus::exporter
