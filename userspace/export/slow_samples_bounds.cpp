#include "export/slow_samples_bounds.h"

#include <algorithm>
#include <cmath>

namespace lotus::exporter {

namespace {
size_t hash_of(int64_t key)
{
    uint64_t x = static_cast<uint64_t>(key) * 0x9E3779B97F4A7C15ull; // (indices are dense: spread them)
    return static_cast<size_t>(x ^ (x >> 29));
}
const double kLogStep = std::log(1.01);
} // namespace

SampleCounts::Entry* SampleCounts::slot(int64_t key)
{
    size_t mask = slots_.size() - 1;
    for (size_t i = hash_of(key) & mask;; i = (i + 1) & mask)
        if (slots_[i].key == key || slots_[i].key == kEmpty)
            return &slots_[i];
}

const SampleCounts::Entry* SampleCounts::find(int64_t key) const
{
    if (slots_.empty() || key == kEmpty)
        return nullptr;
    const Entry* e = const_cast<SampleCounts*>(this)->slot(key);
    return e->key == key ? e : nullptr;
}

void SampleCounts::grow()
{
    std::vector<Entry> old;
    old.swap(slots_);
    slots_.assign(old.empty() ? 1024 : old.size() * 2, Entry{});
    for (const auto& e : old)
        if (e.key != kEmpty)
            *slot(e.key) = e;
}

void SampleCounts::count(Entry& e, int64_t key, uint32_t seen, float loader_ms, int64_t bytes)
{
    if (e.key == kEmpty)
        e.key = key, used_++;
    e.seen += seen;
    if (loader_ms >= 0 && (e.fastest < 0 || loader_ms < e.fastest))
        e.fastest = loader_ms, e.bytes = bytes;
}

bool SampleCounts::add(int64_t key, float loader_ms, int64_t bytes)
{
    if (key == kEmpty)
        return false;
    if (slots_.empty())
        grow();
    Entry* e = slot(key);
    if (e->key == kEmpty) {
        if (used_ >= kMaxSamples)
            return false;
        if ((used_ + 1) * 4 > slots_.size() * 3) {
            grow();
            e = slot(key);
        }
    }
    count(*e, key, 1, loader_ms, bytes);
    return true;
}

void SampleCounts::merge(const SampleCounts& other)
{
    for (const auto& o : other.slots_) {
        if (o.key == kEmpty)
            continue;
        if (slots_.empty() || (used_ + 1) * 4 > slots_.size() * 3)
            grow();
        count(*slot(o.key), o.key, o.seen, o.fastest, o.bytes);
    }
}

int DroppedTimes::index_of(double ms)
{
    double us = ms * 1e3;
    return us <= 1 ? 0 : static_cast<int>(std::ceil(std::log(us) / kLogStep));
}

void DroppedTimes::add(float ms)
{
    counts_.add(index_of(std::max(0.0f, ms)), 1);
    count_++;
}

void DroppedTimes::merge(const DroppedTimes& other)
{
    counts_.merge(other.counts_);
    count_ += other.count_;
}

uint64_t DroppedTimes::at_most_over(double ms) const
{
    // Bucket i holds (1.01^(i-1), 1.01^i] us: those from the threshold's bucket up may pass it (and the one
    // below: rounding in the logarithm).
    int from = index_of(ms) - 1;
    uint64_t n = 0;
    for (size_t k = 0; k < counts_.size(); k++)
        if (counts_.index(k) >= from)
            n += counts_[k];
    return n;
}

} // namespace lotus::exporter
