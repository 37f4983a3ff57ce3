// The bounded parts of the slow samples' state (export/slow_samples.h), so that a DataLoader's every sample time
// is analysed however long the run: a sample's times seen and its fastest loading in a capped table, and the
// times let go of (under a candidate bound) counted in logarithmic buckets, so that the summary can tell how
// many of them the final threshold would have called slow.
#pragma once
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/index_counts.h"

namespace lotus::exporter {

// Per sample (its key: a dataset index >= 0 or a file's hash < 0): times seen, fastest loading and the file's
// size at it. Open addressing; the first kMaxSamples distinct samples of a DataLoader are counted, later ones
// not (add() says so).
class SampleCounts {
public:
    static constexpr int64_t kEmpty = std::numeric_limits<int64_t>::min(); // (also the key of no sample)
    static constexpr size_t kMaxSamples = 3 << 15; // 98,304: 2^17 slots of 24 bytes at most (3 MB)
    struct Entry {
        int64_t key = kEmpty;
        int64_t bytes = -1;  // the file's size at its fastest loading; -1 unknown
        float fastest = -1;  // ms; -1: no loader span
        uint32_t seen = 0;
    };
    // Counts one time of `key`; false where the table is full and `key` is not in it (not counted).
    bool add(int64_t key, float loader_ms, int64_t bytes);
    const Entry* find(int64_t key) const;
    // Adds another table's samples (at analysis, where DataLoaders' groups are joined: may pass kMaxSamples).
    void merge(const SampleCounts& other);
    size_t size() const { return used_; }
    size_t memory_bytes() const { return slots_.capacity() * sizeof(Entry); }
    const std::vector<Entry>& slots() const { return slots_; } // (entries with key kEmpty are free)

private:
    Entry* slot(int64_t key); // its entry or the free one where it would go; slots_ not empty
    void grow();
    void count(Entry& e, int64_t key, uint32_t seen, float loader_ms, int64_t bytes);
    std::vector<Entry> slots_; // a power of two, at most 3/4 used
    size_t used_ = 0;
};

// Counts of non-negative times (ms) in buckets of 1 % ((1.01^(i-1), 1.01^i] us; under 1 us in one): how many of
// them pass a threshold, at most (a bucket that holds the threshold counts whole).
class DroppedTimes {
public:
    void add(float ms);
    void merge(const DroppedTimes& other);
    uint64_t count() const { return count_; }
    uint64_t at_most_over(double ms) const;
    size_t memory_bytes() const { return counts_.memory_bytes(); }

private:
    static int index_of(double ms);
    uint64_t count_ = 0;
    common::IndexCounts counts_; // per bucket: between the smallest and the largest time counted
};

} // namespace lotus::exporter
