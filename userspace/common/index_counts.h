// Counts per integer index (a log-scaled histogram's buckets: quantile_sketch.h, export/slow_samples_bounds.h),
// held densely from the smallest index counted to the largest: a few hundred counters for times that span a few
// decades, whatever their number.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace lotus::common {

class IndexCounts {
public:
    void add(int index, uint64_t n)
    {
        if (counts_.empty()) {
            first_ = index;
            counts_.assign(1, 0);
        } else if (index < first_) {
            counts_.insert(counts_.begin(), static_cast<size_t>(first_ - index), 0);
            first_ = index;
        } else if (static_cast<size_t>(index - first_) >= counts_.size()) {
            counts_.resize(static_cast<size_t>(index - first_) + 1, 0);
        }
        counts_[static_cast<size_t>(index - first_)] += n;
    }
    void merge(const IndexCounts& other)
    {
        for (size_t k = 0; k < other.counts_.size(); k++)
            if (other.counts_[k])
                add(other.index(k), other.counts_[k]);
    }
    // The k-th counter held, of index(k), from 0 to size() - 1 in increasing index.
    size_t size() const { return counts_.size(); }
    int index(size_t k) const { return first_ + static_cast<int>(k); }
    uint64_t operator[](size_t k) const { return counts_[k]; }
    size_t memory_bytes() const { return counts_.capacity() * sizeof(uint64_t); }

private:
    int first_ = 0; // the index of counts_[0]
    std::vector<uint64_t> counts_;
};

} // namespace lotus::common
