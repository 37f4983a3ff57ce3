// Durations of one kind of span for the summary, in bounded memory however long the run: exact values up to
// kExactLimit of them (percentiles exact), then a log-linear histogram (percentiles within its bucket width,
// 1/kSubBuckets of the value); count, total, mean, std, min and max stay exact throughout.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace lotus::exporter {

class DurationSeries {
public:
    static constexpr size_t kExactLimit = 1 << 18; // 2 MiB of values
    static constexpr unsigned kSubBuckets = 256;   // per power of two: 0.4 % resolution

    void add(uint64_t ns);
    uint64_t count() const { return count_; }
    bool exact() const { return histogram_.empty(); }
    double total_ns() const { return total_; }
    double sum_squares_ns() const { return squares_; }
    uint64_t min_ns() const { return min_; }
    uint64_t max_ns() const { return max_; }
    // Nearest-rank percentile (q in [0, 1]); 0 when empty.
    double percentile(double q) const;

private:
    static size_t bucket_of(uint64_t ns);
    static double bucket_value(size_t b); // the middle of a bucket
    uint64_t count_ = 0, min_ = UINT64_MAX, max_ = 0;
    double total_ = 0, squares_ = 0;
    mutable std::vector<uint64_t> values_; // while exact (sorted lazily)
    mutable bool sorted_ = true;
    std::vector<uint64_t> histogram_;     // counts per bucket once past kExactLimit
};

} // namespace lotus::exporter
