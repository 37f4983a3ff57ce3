// A distribution of non-negative integers (durations in ns) in bounded memory however many values it is fed:
// the first kExactLimit values are kept as they are (quantiles exact), then the values are counted in
// logarithmic buckets (DDSketch's: bucket i holds (gamma^(i-1), gamma^i], gamma = (1 + a) / (1 - a)), where a
// quantile is within kRelativeError (1 %) of the exact one. Count, total, mean, std, min and max stay exact
// throughout. The buckets cover every uint64 value; only those between the smallest and the largest value seen
// are allocated: at most about 2,200 counters (18 KB), a few hundred for durations that span a few decades.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "index_counts.h"

namespace lotus::common {

class QuantileSketch {
public:
    static constexpr double kRelativeError = 0.01;
    static constexpr size_t kExactLimit = 1024; // values kept as they are (8 KB) before the buckets take over

    void add(uint64_t v);
    // Adds another sketch's values (the result is exact while both were and their values fit kExactLimit).
    void merge(const QuantileSketch& other);
    uint64_t count() const { return count_; }
    bool empty() const { return count_ == 0; }
    bool exact() const { return !bucketed_; }
    double total() const { return static_cast<double>(total_); }
    uint64_t total_exact() const { return total_; }
    double sum_squares() const { return squares_; }
    double mean() const { return count_ ? static_cast<double>(total_) / static_cast<double>(count_) : 0; }
    uint64_t min() const { return count_ ? min_ : 0; }
    uint64_t max() const { return max_; }
    // Nearest-rank quantile (q in [0, 1]): exact while exact(), else within kRelativeError of it; 0 when empty.
    double quantile(double q) const;
    // Counters allocated (0 while exact): what the sketch holds besides its fixed members.
    size_t buckets() const { return counts_.size(); }

private:
    static int index_of(uint64_t v); // v >= 1
    static double value_of(int index);
    void bucket(uint64_t v, uint64_t n);
    void to_buckets();
    uint64_t count_ = 0, min_ = UINT64_MAX, max_ = 0, total_ = 0;
    double squares_ = 0;
    mutable std::vector<uint64_t> values_; // while exact (sorted lazily)
    mutable bool sorted_ = true;
    bool bucketed_ = false;
    uint64_t zeros_ = 0;            // values 0 (no bucket)
    IndexCounts counts_;            // per bucket index
};

} // namespace lotus::common
