// The end-of-run summary: per-op duration statistics and per-process sample counts.
#pragma once
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "export/duration_series.h"
#include "model/batches.h"
#include "model/native_map.h"
#include "model/spans.h"

namespace lotus::exporter {

struct DurationStats {
    uint64_t count = 0;
    double cpu_ms = -1;       // mean on-CPU time per span, -1 when not measured
    double on_cpu_pct = -1;   // on-CPU time over wall time
    double minor_faults = -1; // mean per span
    double mean_ms = 0, p50_ms = 0, p95_ms = 0, p99_ms = 0, total_ms = 0;
    double min_ms = 0, max_ms = 0, p25_ms = 0, p75_ms = 0, std_ms = 0;
};

// The DataLoader part of the summary (Lotus's batch analyses).
struct BatchSummary {
    DurationStats prepare, wait, delay;
    uint64_t out_of_order = 0, wait_le_1ms = 0, wait_1_500ms = 0, wait_gt_500ms = 0, delay_gt_500ms = 0;
    double waiting_share = 0; // of the training loop's time, first next() to last
    std::string verdict;
};

BatchSummary summarize_batches(const model::BatchStats& b, const std::map<uint32_t, model::ProcessInfo>& processes,
                               const std::vector<std::pair<std::string, DurationStats>>& op_rows);

// Nearest-rank percentile of sorted values (q in [0, 1]).
double percentile(const std::vector<uint64_t>& sorted, double q);
DurationStats stats_of(const DurationSeries& durations);
DurationStats stats_of(const std::vector<uint64_t>& durations_ns);

// Per-op means of the perf-event counters (--counters).
struct CounterRow {
    std::string op;
    uint64_t count = 0;
    std::vector<double> mean;  // per counter name, in order
    double ipc = -1;           // instructions / cycles when both are counted
    double on_cpu_pct = -1;    // on-CPU time over wall time
};

class Summary {
public:
    void add(const model::Span& s);
    void set_counter_names(std::vector<std::string> names) { counter_names_ = std::move(names); }
    void set_native_map(std::vector<model::OpNativeMap> map) { native_map_ = std::move(map); }
    std::vector<CounterRow> counter_rows() const;
    std::string counters_json() const;   // also the trace's otherData
    std::string native_map_json() const;
    // Op names in first-seen order with their stats; "sample" (a whole Compose call) last.
    std::vector<std::pair<std::string, DurationStats>> rows() const;
    void print(FILE* out, const std::map<uint32_t, model::ProcessInfo>& processes, const BatchSummary* batches,
               const std::vector<std::string>& notes) const;
    // The same content as JSON (--summary-json); schema: schemas/summary.schema.json.
    std::string json(const std::map<uint32_t, model::ProcessInfo>& processes, const BatchSummary* batches,
                     const std::map<std::string, std::string>& run) const;

private:
    struct CounterSums {
        uint64_t cpu_ns = 0, wall_ns = 0, minor_faults = 0, count = 0;
        uint64_t perf[model::kMaxPerfCounters] = {};
    };
    void print_counters(FILE* out) const;
    void print_native_map(FILE* out) const;
    std::vector<std::string> counter_names_;
    std::vector<model::OpNativeMap> native_map_;
    std::vector<std::string> order_;
    std::map<std::string, CounterSums> counters_;
    std::map<std::string, DurationSeries> durations_; // bounded: see duration_series.h
    DurationSeries samples_;
};

} // namespace lotus::exporter
