// The slow samples of a run (issue 80 item 3): per DataLoader of each training process, the samples whose loading
// or whose pipeline took far longer than the others', how often the same sample was slow, and whether loading
// time follows the file's size (a least-squares rate) with the samples that stand out from it. Fed the engine's
// spans: a sample's loader span (its index, file and the file's bytes), its sample span and its ops.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/quantile_sketch.h"
#include "export/slow_samples_bounds.h"
#include "model/spans.h"

namespace lotus::exporter {

// One sample (a dataset index, or its file where the index was not read) slow at least once; the figures are of
// its slowest time.
struct SlowSampleRow {
    int64_t index = -1;      // -1: not read
    std::string path;        // the file its loading opened first; "" none
    int64_t bytes = -1;      // that file's size; -1 unknown
    double ms = 0;           // loader + pipeline
    double loader_ms = -1;   // -1: no loader span
    double pipeline_ms = -1; // the whole pipeline (the sample span); -1: none
    std::vector<std::pair<std::string, double>> ops; // each op's ms, in call order (an op called twice: summed)
    bool slow_loader = false, slow_pipeline = false; // the thresholds that time passed
    uint32_t times_slow = 0, times_seen = 0; // times_seen 0: not counted (neither index nor file known, or the
                                             // sample past the per-sample table)
    double fastest_loader_ms = -1;           // its fastest loading of all its times (-1: none, or not counted)
    double expected_loader_ms = -1;          // the size fit's for its bytes; -1: no fit or bytes unknown
    bool stands_out = false;                 // even its fastest loading took longer than the fit allows
};

// loader_ms = fixed_ms + ms_per_mb x bytes / 1e6, least squares over the samples with a known size (each sample's
// fastest loading: one point per sample), refitted once without those that stand out. A sample stands out (its size does not explain its loading) where it loaded slower
// than the fit expects by more than band_ms (four robust standard deviations of the residuals: the jitter) and
// more than kRelativeBand of the time expected (or of the median, where that is longer: large files' times vary
// more in absolute terms).
struct SizeFit {
    static constexpr double kRelativeBand = 0.5;
    uint64_t samples = 0;   // samples in the refit
    uint64_t stand_out = 0; // samples with a size whose fastest loading is slower than their size explains
    double ms_per_mb = 0, fixed_ms = 0, r2 = 0;
    double band_ms = 0;
    double median_ms = 0; // of the loading times fitted
    double expected_ms(double bytes) const { return fixed_ms + ms_per_mb * bytes / 1e6; }
    bool stands_out(double loader_ms, double bytes) const;
};

struct SlowSampleGroup {
    uint32_t owner = 0;
    int loader = -1;
    std::string title; // its DataLoader's, as the report names it (build_report)
    uint64_t samples = 0;     // sample times analysed: every one of the run
    // Times let go of under a candidate bound that the final threshold fell below: at most this many of them
    // were slow and are missing from slow_times and the rows' times slow (0: none missing).
    uint64_t not_kept = 0;
    uint64_t untracked = 0;   // times of samples past the per-sample table (times seen and fastest not known)
    uint64_t with_bytes = 0;  // of those, loader spans with the file's size known
    double loader_median_ms = -1, loader_threshold_ms = -1;     // -1: fewer than kMinTimes loader spans
    double pipeline_median_ms = -1, pipeline_threshold_ms = -1; // -1: fewer than kMinTimes sample spans
    // Exact while every time was kept (kExactTimes or fewer); else from the histograms: each quantile within
    // 1 %, the threshold within these ms of the one exact quantiles would give.
    bool thresholds_exact = true;
    double loader_error_ms = 0, pipeline_error_ms = 0;
    uint64_t slow_times = 0;   // sample times above a threshold
    uint64_t slow_samples = 0; // distinct samples among them (a sample known by neither index nor file: each time)
    uint64_t slow_every_time = 0; // samples loaded more than once and slow each time (the data, not the machine)
    std::vector<SlowSampleRow> rows; // most often slow first, then slowest; at most kRows
    std::optional<SizeFit> fit;      // none: fewer than kMinTimes sizes, or all of one size
};

// The threshold of a part (the loader, the pipeline): the farther of Tukey's far-out fence (Q3 + 3 x IQR) and
// twice the median, so that a few percent of slow files still stand out (a 99th percentile would hide all but
// the top 1 %), and a tight distribution's jitter does not.
double slow_threshold(std::vector<float> ms);

// Least squares of y on x; none where x does not vary. r2: 1 - residual / total sum of squares (1 where y is
// constant and fitted exactly).
struct LineFit {
    double slope = 0, intercept = 0, r2 = 0;
};
std::optional<LineFit> least_squares(const std::vector<double>& x, const std::vector<double>& y);

// Every sample time of a run in bounded memory: the quantiles in histograms (common::QuantileSketch; exact while
// the times fit kExactTimes), the times that may be slow as candidates (every time at first, then those over a
// fraction of the running threshold, the least slow let go of where they pass kMaxCandidates), each sample's
// counts in a capped table, the slowest times' details in a heap.
class SlowSamples {
public:
    static constexpr size_t kMinTimes = 20;      // fewer sample times than this: no threshold, no fit
    static constexpr size_t kExactTimes = 1 << 14; // a DataLoader's first times, all kept: thresholds exact
    static constexpr size_t kMaxCandidates = 1 << 17; // per group, 16 bytes each: 2 MB at most
    static constexpr double kAdmit = 0.6;        // a candidate: over 0.6 x the running threshold (at first)
    static constexpr size_t kRebound = 1 << 12;  // times between two estimates of the running threshold
    static constexpr size_t kKept = 256;         // per group: the slowest times' details (ops, file)
    static constexpr size_t kRows = 50;
    void add(const model::Span& s);
    // `from`'s samples are `into`'s (Summary::merge_group).
    void merge_group(uint32_t from_owner, int from_loader, uint32_t into_owner, int into_loader);
    std::vector<SlowSampleGroup> analyze() const;
    size_t memory_bytes() const; // what the groups hold (pending samples aside: at most kMaxPending)

private:
    using Key = std::pair<uint32_t, int>; // owner, loader
    struct Pending {
        Key group;
        int64_t index = -1, bytes = -1;
        std::string path;
        int64_t loader_ns = -1, pipeline_ns = -1;
        std::vector<std::pair<uint32_t, uint64_t>> ops; // op name (interned), ns
    };
    struct Time {
        int64_t key;   // the index (>= 0), a hash of the file (< 0), or kNoKey
        int64_t bytes; // -1 unknown
        float loader_ms, pipeline_ms; // < 0: none
    };
    struct Candidate { // a time that may be slow
        int64_t key;
        float loader_ms, pipeline_ms;
    };
    struct Detail {
        Time t;
        int64_t index;
        std::string path;
        std::vector<std::pair<uint32_t, uint64_t>> ops;
        double ms() const;
    };
    struct Group {
        uint64_t times = 0, with_bytes = 0, untracked = 0;
        common::QuantileSketch loader_ns, pipeline_ns; // every time's
        std::vector<Candidate> candidates; // every time until one was let go of
        bool dropped_any = false;
        DroppedTimes dropped_loader, dropped_pipeline; // the times let go of
        double bound_loader = -1, bound_pipeline = -1; // the running thresholds' estimates (-1: none)
        double admit = kAdmit; // a candidate passes admit x a running threshold (raised where they are too many)
        SampleCounts counts;
        std::vector<Detail> slowest; // a min-heap by ms, kKept at most
        void merge(const Group& o);
    };
    static constexpr size_t kMaxPending = 4096; // samples whose loader span never comes (begun before tracing)
    void finalize(Pending p) const;
    void flush() const; // every pending sample, as far as it came
    Key resolve(Key k) const;
    static double score(const Group& g, const Candidate& c); // its farthest part over the running threshold
    static void let_go(Group& g, const Candidate& c);
    static void prune(Group& g); // lets go of the candidates admit no longer passes
    static void rebound(Group& g);
    static void raise(Group& g);
    struct Count { // a sample's times
        uint32_t seen = 0, slow = 0; // seen 0: not known
        float fastest_loader = -1;
    };
    static void thresholds(const Group& g, SlowSampleGroup& out);
    static bool slow_loader(float loader_ms, const SlowSampleGroup& g);
    static bool slow_pipeline(float pipeline_ms, const SlowSampleGroup& g);
    static std::unordered_map<int64_t, uint32_t> count_slow(const Group& g, SlowSampleGroup& out);
    static void fit(const Group& g, SlowSampleGroup& out);
    SlowSampleRow row_of(const Detail& d, const SlowSampleGroup& g, const Count& c) const;
    SlowSampleGroup analyze_group(Key key, const Group& g) const;
    static SizeFit fit_sizes(const std::vector<double>& x, const std::vector<double>& y);

    // (mutable: analyze() takes in the samples still pending, whose other span will not come any more)
    mutable std::map<uint64_t, Pending> pending_; // by sample_id, until both its loader and its sample span came
    mutable std::map<Key, Group> groups_;
    std::map<Key, Key> merged_;
    std::unordered_map<std::string, uint32_t> op_ids_;
    std::vector<std::string> op_names_;
};

} // namespace lotus::exporter
