// The end-of-run summary: per-op duration statistics and per-process sample counts.
#pragma once
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "model/spans.h"

namespace lotus::exporter {

struct DurationStats {
    uint64_t count = 0;
    double mean_ms = 0, p50_ms = 0, p95_ms = 0, p99_ms = 0, total_ms = 0;
};

// Nearest-rank percentile of sorted values (q in [0, 1]).
double percentile(const std::vector<uint64_t>& sorted, double q);
DurationStats stats_of(std::vector<uint64_t> durations_ns);

class Summary {
public:
    void add(const model::Span& s);
    // Op names in first-seen order with their stats; "sample" (a whole Compose call) last.
    std::vector<std::pair<std::string, DurationStats>> rows() const;
    void print(FILE* out, const std::map<uint32_t, model::ProcessInfo>& processes,
               const std::vector<std::string>& notes) const;

private:
    std::vector<std::string> order_;
    std::map<std::string, std::vector<uint64_t>> durations_;
    std::vector<uint64_t> samples_;
};

} // namespace lotus::exporter
