// The end-of-run summary's statistics: per-op duration statistics per DataLoader (of each training process), the
// batch analyses with the training loops' verdicts and advice, the counters and the native map. The report that
// renders them (text, JSON, HTML) is export/report.h.
#pragma once
#include "export/run_info.h"
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "export/duration_series.h"
#include "export/slow_samples.h"
#include "export/usage_summary.h"
#include "export/worker_model.h"
#include "model/batches.h"
#include "model/native_map.h"
#include "model/wait_causes.h"
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

// What a row of the op statistics stands for. Code reads a row's part, never its name: an op may be named "loader".
enum class Part : uint8_t { Op, Loader, Collate, Sample };

struct Row {
    Part part = Part::Op;
    // The row's key in the summary JSON's `ops`: an op's or --span function's row name (row_name), else "loader",
    // "collate" or "sample".
    std::string name;
    DurationStats stats;
    std::string label() const { return part == Part::Sample ? "sample (whole pipeline)" : name; } // as printed
};
using Rows = std::vector<Row>;

// One DataLoader of one training process (owner 0 / loader -1: not known).
struct GroupKey {
    uint32_t owner = 0;
    int loader = -1;
    auto operator<=>(const GroupKey&) const = default;
};

// The DataLoader part of the summary (Lotus's batch analyses), for one DataLoader of one training process.
struct BatchSummary {
    GroupKey key;
    DurationStats prepare, wait, delay;
    uint64_t out_of_order = 0, wait_le_1ms = 0, wait_1_500ms = 0, wait_gt_500ms = 0;
    uint64_t delay_le_1ms = 0, delay_1_500ms = 0, delay_gt_500ms = 0;
    uint64_t unnamed = 0, unmatched = 0;
    bool arrival_order = false; // model::BatchStats
    uint64_t misnamed = 0, passes_before = 0;
    bool joined_partial = false; // model::BatchStats: the pass in flight at attach is counted here
    uint64_t partial_batches = 0;
    std::vector<model::CauseTotal> causes; // its waits by cause (model/wait_causes.h), largest first
};

// The graded verdict on a training loop (a rank), on the ladder of TensorFlow's input-pipeline analyzer: its
// waiting share (the time it spent waiting in next() for a batch over its time from its first next()'s start to
// its last one's end) kHighlyInputBound or more: highly input-bound; kModeratelyInputBound up to that:
// moderately; below: not. The values are the metric's (lotus_input_bound_grade).
enum class InputBound : uint8_t { Not = 0, Moderately = 1, Highly = 2 };
inline constexpr double kModeratelyInputBound = 0.05, kHighlyInputBound = 0.20;
// None where it cannot be known: no batch consumed, or no time between its first next() and its last.
std::optional<InputBound> input_bound_grade(uint64_t batches, double seconds, double waiting_share);
const char* input_bound_key(InputBound g);  // "not", "moderately", "highly" (the JSON's)
const char* input_bound_text(InputBound g); // "not input-bound", "moderately input-bound", "highly input-bound"

// A training loop's figures from the batch tracker, as the summary and the metrics take them.
struct LoopFigures {
    uint64_t batches = 0;     // batches it consumed (its waits in next() that returned one)
    double waiting_share = 0; // the sum of those waits over its first next()'s start to its last one's end
    double seconds = 0;       // its first next()'s start to its last one's end
    std::optional<InputBound> grade;
};
LoopFigures loop_figures(const model::BatchTracker& batches, uint32_t pid);

// A training loop: how much of its time (first next() to last) it spent waiting in next().
struct LoopSummary {
    uint32_t pid = 0;
    uint64_t batches = 0;
    double waiting_share = 0;
    double seconds = 0; // its first next() to its last
    std::optional<InputBound> grade; // none: not known (no batch consumed)
    std::string verdict;
    std::vector<std::string> advice; // what the numbers suggest doing, each a sentence with its figures
    std::optional<WorkerModel> estimate; // its workers and CPUs known: samples/s by number of workers (worker_model.h)
    BatchSummary all; // its DataLoaders together
};

struct DataLoaderReport {
    std::vector<BatchSummary> loaders;
    std::vector<LoopSummary> loops;
    bool empty() const { return loaders.empty() && loops.empty(); }
};

class Summary;
// cpus: CPUs the traced job could run on (its affinity, or a --cpus limit below it; 0: not known, as in record
// files of earlier versions).
// causes: the waits' causes (null: not split).
DataLoaderReport summarize_batches(const model::BatchTracker& batches,
                                   const std::map<uint32_t, model::ProcessInfo>& processes, const Summary& summary,
                                   double cpus, const model::WaitCauses* causes = nullptr);

// Nearest-rank percentile of sorted values (q in [0, 1]).
double percentile(const std::vector<uint64_t>& sorted, double q);
// Quantiles within 1 % once a series outgrows common::QuantileSketch::kExactLimit values (exact below).
DurationStats stats_of(const common::QuantileSketch& durations);
DurationStats stats_of(const std::vector<uint64_t>& durations_ns);

// One of the longest calls of a part (an op, the loader, the collation), to point at in the trace.
struct LongCall {
    uint64_t ns = 0;
    uint32_t pid = 0;
    uint64_t sample_id = 0; // 0: a collation (no sample's)
};

// Per-op means of the perf-event counters (--counters).
struct CounterRow {
    Part part = Part::Op; // an op's or the whole pipeline's (the sample's)
    std::string op;       // as Row::name
    uint64_t count = 0;
    std::vector<double> mean;  // per counter name, in order
    double ipc = -1;           // instructions / cycles when both are counted
    double on_cpu_pct = -1;    // on-CPU time over wall time
    std::string label() const { return part == Part::Sample ? "sample (whole pipeline)" : op; }
};

class Summary {
public:
    static constexpr size_t kLongest = 8;
    void add(const model::Span& s);
    // The longest calls of a part of one training process's DataLoaders, longest first: at most kLongest.
    std::vector<LongCall> longest(uint32_t owner, const Row& row) const;
    void set_counter_names(std::vector<std::string> names) { counter_names_ = std::move(names); }
    // Ops first, then the loader, the collation, the pipeline's own time, batches outside samples, the training
    // loop's wait, and what ran outside any span last.
    void set_native_map(std::vector<model::OpNativeMap> map);
    std::vector<CounterRow> counter_rows() const;
    std::string counters_json() const; // the trace's otherData (the summary JSON's "counters")
    std::string native_map_json() const;
    const std::vector<model::OpNativeMap>& native_map() const { return native_map_; }
    const std::vector<std::string>& counter_names() const { return counter_names_; }
    // Op names in first-seen order with their stats over every DataLoader; "sample" (a whole pipeline call) last.
    Rows rows() const;
    // Samples (pipeline calls) per second, from the first sample's start to the last one's end; 0: fewer than 2.
    double samples_per_s() const;
    uint64_t samples() const { return all_.samples.count(); }
    double sample_seconds() const // the first sample's start to the last one's end
    {
        return last_sample_ns_ > first_sample_ns_ ? static_cast<double>(last_sample_ns_ - first_sample_ns_) / 1e9 : 0;
    }
    // Whether most loader spans opened a file (an image dataset: loading is reading and decoding it).
    bool loaders_read_files() const { return loaders_ && files_opened_ * 2 > loaders_; }
    // The same per DataLoader of each training process, in first-seen order.
    std::vector<std::pair<GroupKey, Rows>> groups() const;
    // `from`'s figures are `into`'s (a pass in flight at attach found to be that DataLoader's): one group, at the
    // first-seen place of either.
    void merge_group(const GroupKey& from, const GroupKey& into);
    const SlowSamples& slow_samples() const { return slow_; }
    void usage(const model::UsagePoint& p) { model_.usage(p); }
    void host_cpu(const model::RecordHostCpu& h) { model_.host(h); }
    void folded(uint32_t pid, uint32_t into) { model_.fold(pid, into); }
    const ModelFigures& model_figures() const { return model_; }
    // The processes' resource use at the end (the usage tracker's; null: not read), for the workers model.
    void set_process_usage(const std::map<uint32_t, model::ProcessUsage>* u) { process_usage_ = u; }
    const std::map<uint32_t, model::ProcessUsage>* process_usage() const { return process_usage_; }

private:
    struct CounterSums {
        uint64_t cpu_ns = 0, wall_ns = 0, minor_faults = 0, count = 0;
        uint64_t perf[model::kMaxPerfCounters] = {};
    };
    // Rows by name: the names of rows of different parts differ (op_row_name).
    struct Group {
        std::vector<std::string> order;                  // ops' rows, first seen first
        std::map<std::string, DurationSeries> durations; // ops' rows; bounded: see duration_series.h
        DurationSeries loaders, collates, samples;
        std::map<std::string, CounterSums> counters;
        std::map<std::string, std::vector<LongCall>> longest; // per row, longest first, kLongest at most
    };
    Rows rows_of(const Group& g) const;
    std::vector<std::string> counter_names_;
    std::vector<model::OpNativeMap> native_map_;
    Group all_;
    std::map<GroupKey, Group> groups_;
    std::vector<GroupKey> group_order_;
    SlowSamples slow_;
    ModelFigures model_;
    const std::map<uint32_t, model::ProcessUsage>* process_usage_ = nullptr;
    uint64_t loaders_ = 0, files_opened_ = 0;
    uint64_t first_sample_ns_ = UINT64_MAX, last_sample_ns_ = 0; // the first sample's start, the last one's end
};

// A counter that counts nanoseconds (task-clock, cpu-clock): shown in ms.
bool clock_counter(const std::string& name);

// part over whole in %; 0 where whole is 0.
double share(uint64_t part, uint64_t whole);

// The counters and native map tables as the summary JSON (and the trace's otherData) writes them.
nlohmann::ordered_json counters_json_value(const std::vector<std::string>& names, const std::vector<CounterRow>& rows);
nlohmann::ordered_json native_map_json_value(const std::vector<model::OpNativeMap>& map);

// A prose line of the summary (legends, advice, batch figures) wrapped at `width` columns; continuation lines
// indented by `indent`.
void print_wrapped(FILE* out, const std::string& text, size_t indent = 2, size_t width = 110);

// "ColorJitter (in RandomApply)" for an op of a container transform, else its name (model::op_row_name).
std::string row_name(const model::Span& s);
// The same without a copy where it is the span's name (most ops': the summary's inner loop); else in scratch.
const std::string& row_name(const model::Span& s, std::string& scratch);

} // namespace lotus::exporter
