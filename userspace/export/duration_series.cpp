#include "duration_series.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace lotus::exporter {

namespace {
constexpr unsigned kSubBits = 8; // log2(kSubBuckets)
static_assert((1u << kSubBits) == DurationSeries::kSubBuckets);
} // namespace

// Values below kSubBuckets have a bucket each; above, each power of two is split into kSubBuckets.
size_t DurationSeries::bucket_of(uint64_t ns)
{
    if (ns < kSubBuckets)
        return ns;
    unsigned exp = 63u - static_cast<unsigned>(std::countl_zero(ns)); // >= kSubBits
    uint64_t sub = (ns >> (exp - kSubBits)) - kSubBuckets;            // top bits after the leading one
    return (exp - kSubBits + 1) * kSubBuckets + sub;
}

double DurationSeries::bucket_value(size_t b)
{
    if (b < kSubBuckets)
        return static_cast<double>(b);
    unsigned exp = static_cast<unsigned>(b / kSubBuckets) + kSubBits - 1;
    uint64_t sub = b % kSubBuckets;
    double width = std::ldexp(1.0, static_cast<int>(exp - kSubBits));
    return (static_cast<double>(kSubBuckets + sub) + 0.5) * width;
}

void DurationSeries::add(uint64_t ns)
{
    count_++;
    min_ = std::min(min_, ns);
    max_ = std::max(max_, ns);
    double v = static_cast<double>(ns);
    total_ += v;
    squares_ += v * v;
    if (histogram_.empty() && values_.size() < kExactLimit) {
        sorted_ = sorted_ && (values_.empty() || values_.back() <= ns);
        values_.push_back(ns);
        return;
    }
    if (histogram_.empty()) { // fold the exact values into the histogram, once
        histogram_.assign(bucket_of(UINT64_MAX) + 1, 0);
        for (uint64_t x : values_)
            histogram_[bucket_of(x)]++;
        values_.clear();
        values_.shrink_to_fit();
    }
    histogram_[bucket_of(ns)]++;
}

double DurationSeries::percentile(double q) const
{
    if (count_ == 0)
        return 0;
    uint64_t rank = static_cast<uint64_t>(std::ceil(q * static_cast<double>(count_)));
    rank = std::clamp<uint64_t>(rank, 1, count_);
    if (histogram_.empty()) {
        if (!sorted_) {
            std::sort(values_.begin(), values_.end());
            sorted_ = true;
        }
        return static_cast<double>(values_[rank - 1]);
    }
    uint64_t seen = 0;
    for (size_t b = 0; b < histogram_.size(); b++) {
        seen += histogram_[b];
        if (seen >= rank) // the bucket's middle, kept within what was seen
            return std::clamp(bucket_value(b), static_cast<double>(min_), static_cast<double>(max_));
    }
    return static_cast<double>(max_);
}

} // namespace lotus::exporter
