// What happened over time, for the HTML report's time charts: per process, the time inside batch spans (a
// DataLoader worker busy) and inside waits (a training loop blocked in next()); samples completed by the job.
// Fixed-width bins from the run's start, the width doubled (bins merged pairwise) whenever the run outgrows
// kMaxBins, so memory stays bounded however long the run; every figure is exact for its bin.
#pragma once
#include <cstdint>
#include <map>
#include <vector>

#include "model/spans.h"
#include "model/usage.h"

namespace lotus::exporter {

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
    const std::map<uint32_t, std::vector<uint64_t>>& busy_ns() const { return busy_; }
    const std::map<uint32_t, std::vector<uint64_t>>& wait_ns() const { return wait_; }
    const std::vector<uint64_t>& samples() const { return samples_; } // sample spans ending per bin
    const std::map<uint32_t, std::vector<uint64_t>>& cpu_ns() const { return cpu_; }   // per process, per bin
    const std::map<uint32_t, std::vector<uint64_t>>& rss_kb() const { return rss_; }   // per process, highest per bin

private:
    void cover(std::vector<uint64_t>& bins, uint64_t start_ns, uint64_t end_ns); // relative to t0
    void grow(size_t bin);                                                        // widening while it is too far
    static void halve(std::vector<uint64_t>& v, bool highest = false); // sums (or keeps the highest of) pairs
    uint64_t t0_, width_ = kFirstWidthNs;
    size_t bins_ = 0;
    uint64_t end_ = 0;
    std::map<uint32_t, std::vector<uint64_t>> busy_, wait_, cpu_, rss_;
    std::vector<uint64_t> samples_;
};

} // namespace lotus::exporter
