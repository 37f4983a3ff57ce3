// The end-of-run report: one model of what the run found, built once from the summary's statistics, the batch
// analyses, the processes, the resource use and the run's facts. The printed summary (summary_text.cpp), the
// summary JSON (summary_json.cpp) and the HTML report (html_report.cpp) are renderings of it: what is in a
// section, in which order and under which title is decided here, once; the renderers only format.
#pragma once
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "export/run_info.h"
#include "export/summary.h"
#include "export/usage_summary.h"
#include "export/worker_memory.h"
#include "model/native_map.h"
#include "model/spans.h"

namespace lotus::exporter {

// One DataLoader of one training process: its ops and its batches.
struct LoaderSection {
    GroupKey key;
    std::string title;       // "DataLoader 0 of main", "DataLoader ? of main (its iterator was made before ...)"
    std::string owner_label; // "" where the training process is not known
    std::string note;        // the pass in flight at attach: counted here, or why it is a section of its own
    Rows rows;               // empty: none of its samples was seen
    std::optional<BatchSummary> batches;
};

// A traced process with a DataLoader role (a training process, a worker, or one that ran samples).
struct ProcessEntry {
    uint32_t pid = 0;
    const model::ProcessInfo* info = nullptr; // the engine's
    std::string label;                        // model::process_label
    bool worker = false;                      // a DataLoader worker (by its loop or its worker id)
};

// The processes of one role, as the printed table shows them: a worker id stands for every process that played it.
struct RoleEntry {
    std::string label, loader; // loader: its DataLoader number, "?" where unknown, "-" for a training process
    std::string pids;          // comma-separated (folded processes' included)
    size_t processes = 0;
    uint64_t samples = 0, batches = 0, busy_ns = 0, seen_ns = 0;
    bool has_busy() const { return batches && seen_ns; } // busy/idle are about DataLoader workers
};

struct Throughput {
    uint64_t samples = 0;
    double seconds = 0, samples_per_s = 0;
};

// A training process (a rank) where there are two or more: its throughput and its wait, side by side.
struct RankRow {
    uint32_t pid = 0;
    std::string label;           // "rank 3", "local rank 1 on node-b"
    int rank = -1, local_rank = -1; // global (RANK), local (LOCAL_RANK or spawn's index); -1 unknown
    std::string node;            // "" where not known
    uint64_t samples = 0, batches = 0;
    double seconds = 0, samples_per_s = 0, wait_share = 0, prepare_mean_ms = 0;
    std::optional<InputBound> grade; // its loop's graded verdict (LoopSummary::grade); none: not known
};

// One rank whose wait in next() stands out from the others': at each collective (all-reduce) every rank waits
// for it, so its input pipeline holds all of them back.
struct Straggler {
    RankRow rank;
    double others_wait_share = 0; // the other ranks' median
    std::string text;             // what to do, in words
};

// A process the live watch named stuck (model::StuckEpisodes, from the stream's RecordStuck), for the JSON and HTML.
struct StuckRow {
    uint32_t pid = 0;
    std::string label;
    double since_s = 0, said_s = 0; // from the run's start: the last span's end (or its work's start), the naming
    double end_s = -1;              // when it ended a span again; -1: still stuck when tracing stopped
    double threshold_s = 0;
    int64_t sample = -1, batch = -1;
    std::string op, stack; // the open op ("" none); its main thread's Python stack, innermost first, a frame a line
};

struct Report {
    RunInfo run;
    const std::map<uint32_t, model::ProcessInfo>* processes = nullptr; // the engine's (the charts' roles)
    Rows ops;                            // every DataLoader together
    std::vector<LoaderSection> loaders;  // per DataLoader of each training process, in first-seen order
    std::vector<LoopSummary> loops;      // each training loop: its waits, verdict and advice
    std::vector<std::string> loop_labels; // loops[i]'s process label
    std::vector<RankRow> ranks;           // every training loop, where there are two or more
    std::optional<Straggler> straggler;   // with ranks: the one that stands out, if one does
    std::optional<Throughput> throughput; // where 2 samples or more were seen
    std::vector<ProcessEntry> entries;   // by pid
    std::vector<RoleEntry> roles;        // training processes first, then their workers by id
    std::vector<UsageRow> usage;         // empty: not read
    unsigned usage_interval_ms = 0;
    std::optional<WorkerMemoryReport> worker_memory; // per worker, private memory over what it read; none: not read
    std::vector<std::string> counter_names;
    std::vector<CounterRow> counters;
    std::vector<model::OpNativeMap> native_map;
    std::vector<model::WaitRow> waits; // the longest waits with their causes, longest first
    uint64_t waits_seen = 0;           // all the waits attributed (waits holds the longest kRows of them)
    std::vector<SlowSampleGroup> slow_samples; // per DataLoader of each training process
    std::vector<StuckRow> stuck;               // in the order named
    std::vector<std::string> notes; // what the printed summary says at its end (a note may open with "\n")
};

struct ReportInput {
    const Summary& summary;
    const DataLoaderReport& batches;
    const std::map<uint32_t, model::ProcessInfo>& processes;
    RunInfo run;
    std::vector<std::string> notes;
    std::vector<UsageRow> usage = {};
    unsigned usage_interval_ms = 0;
    std::function<std::string(uint32_t)> node_of = {}; // a process's node; empty: not known
    const model::BatchTracker* batch_tracker = nullptr;  // the DataLoaders' names and joins; null: none known
    const model::WaitCauses* wait_causes = nullptr;      // the longest waits, attributed; null: none
};

// The straggler among ranks, or none: the rank that waited most, where its share is at least 10 points and twice
// the others' median.
std::optional<Straggler> find_straggler(const std::vector<RankRow>& ranks);

Report build_report(const ReportInput& in);

// The renderings.
void print_report(FILE* out, const Report& r);
std::string report_json(const Report& r); // --summary-json; schema: schemas/summary.schema.json

} // namespace lotus::exporter
