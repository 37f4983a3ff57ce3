#include "quantile_sketch.h"

#include <algorithm>
#include <cmath>

namespace lotus::common {

namespace {
// A bucket's middle (2 gamma^i / (gamma + 1)) is within a of every value in it; a slightly smaller a than the
// stated bound keeps values on a bucket's edge within it despite rounding in the logarithm.
constexpr double kAlpha = QuantileSketch::kRelativeError * 0.99;
const double kGamma = (1 + kAlpha) / (1 - kAlpha);
const double kLogGamma = std::log(kGamma);
} // namespace

int QuantileSketch::index_of(uint64_t v)
{
    return static_cast<int>(std::ceil(std::log(static_cast<double>(v)) / kLogGamma));
}

double QuantileSketch::value_of(int index)
{
    return 2 * std::exp(kLogGamma * index) / (kGamma + 1);
}

void QuantileSketch::bucket(uint64_t v, uint64_t n)
{
    if (v == 0) {
        zeros_ += n;
        return;
    }
    counts_.add(index_of(v), n);
}

void QuantileSketch::to_buckets()
{
    if (bucketed_)
        return;
    bucketed_ = true;
    for (uint64_t v : values_)
        bucket(v, 1);
    values_.clear();
    values_.shrink_to_fit();
    sorted_ = true;
}

void QuantileSketch::add(uint64_t v)
{
    count_++;
    min_ = std::min(min_, v);
    max_ = std::max(max_, v);
    total_ += v;
    double d = static_cast<double>(v);
    squares_ += d * d;
    if (!bucketed_ && values_.size() < kExactLimit) {
        sorted_ = sorted_ && (values_.empty() || values_.back() <= v);
        values_.push_back(v);
        return;
    }
    to_buckets();
    bucket(v, 1);
}

void QuantileSketch::merge(const QuantileSketch& o)
{
    if (!o.count_)
        return;
    count_ += o.count_;
    min_ = std::min(min_, o.min_);
    max_ = std::max(max_, o.max_);
    total_ += o.total_;
    squares_ += o.squares_;
    if (!bucketed_ && !o.bucketed_ && values_.size() + o.values_.size() <= kExactLimit) {
        values_.insert(values_.end(), o.values_.begin(), o.values_.end());
        sorted_ = false;
        return;
    }
    to_buckets();
    if (!o.bucketed_) {
        for (uint64_t v : o.values_)
            bucket(v, 1);
        return;
    }
    zeros_ += o.zeros_;
    counts_.merge(o.counts_);
}

double QuantileSketch::quantile(double q) const
{
    if (count_ == 0)
        return 0;
    uint64_t rank = static_cast<uint64_t>(std::ceil(q * static_cast<double>(count_)));
    rank = std::clamp<uint64_t>(rank, 1, count_);
    if (!bucketed_) {
        if (!sorted_) {
            std::sort(values_.begin(), values_.end());
            sorted_ = true;
        }
        return static_cast<double>(values_[rank - 1]);
    }
    uint64_t seen = zeros_;
    if (seen >= rank)
        return 0;
    for (size_t k = 0; k < counts_.size(); k++) {
        seen += counts_[k];
        if (seen >= rank) // the bucket's middle, kept within what was seen
            return std::clamp(value_of(counts_.index(k)), static_cast<double>(min_),
                              static_cast<double>(max_));
    }
    return static_cast<double>(max_);
}

} // namespace lotus::common
