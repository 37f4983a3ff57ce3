// Durations of one kind of span for the summary, in bounded memory however long the run: common::QuantileSketch
// (exact up to its kExactLimit values, then quantiles within 1 %; count, total, mean, std, min and max exact),
// under the names the summary reads.
#pragma once
#include <cstdint>

#include "common/quantile_sketch.h"

namespace lotus::exporter {

class DurationSeries : public common::QuantileSketch {
public:
    double total_ns() const { return total(); }
    double sum_squares_ns() const { return sum_squares(); }
    uint64_t min_ns() const { return min(); }
    uint64_t max_ns() const { return max(); }
    // Nearest-rank percentile (q in [0, 1]); 0 when empty.
    double percentile(double q) const { return quantile(q); }
};

} // namespace lotus::exporter
