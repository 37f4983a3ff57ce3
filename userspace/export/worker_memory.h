// Memory that DataLoader workers copy: each worker's private memory (USS, read with PSS) over the samples it had
// read by each reading. A forked worker shares its parent's pages; reading Python objects the dataset holds
// (lists, dicts) writes their reference counts, and each page written becomes the worker's own copy
// (copy-on-read, pytorch/pytorch#13246): its private memory grows with the samples while its anonymous memory
// (smaps_rollup's Anonymous: resident anonymous pages, shared or not) does not, the page having been resident and
// mapped already. Memory it allocates anew (a leak) grows both. (RSS would not do: a worker paging in code it
// runs for the first time grows its RSS with shared file pages.)
// So a curve is judged by what its growth was made of, and by its shape: copying is bounded by the pages shared
// (it flattens once the data read was copied), a leak keeps growing. Computed from the record stream alone.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "model/record_dispatch.h"
#include "model/spans.h"

namespace lotus::exporter {

// One reading of a worker: what it had read by then (samples, or batches where no sample was seen) and its memory.
struct MemoryPoint {
    double read = 0;
    double private_mb = 0, anon_mb = 0; // anon: Anonymous (RSS where it was not read)
    double at_s = 0;       // the reading's time (any origin)
    double shared_mb = -1; // written pages it shares (Shared_Dirty): what it can still copy; -1 not read
};

enum class MemoryVerdict { Unknown, Steady, CopyOnRead, LeakLike };
const char* memory_verdict_key(MemoryVerdict v); // "unknown", "steady", "copy-on-read", "leak-like" (the JSON's)

struct CurveJudgement {
    MemoryVerdict verdict = MemoryVerdict::Unknown;
    size_t readings = 0;
    double rate_mb_per_1000 = 0; // private MB per 1,000 read (least squares over the readings)
    double growth_mb = 0;        // private memory, last reading less first
    double copied_mb = 0;        // of it, pages it had mapped already (private growth less anonymous growth)
    double new_mb = 0;           // of it, memory it mapped anew (anonymous growth)
    double copied_share = 0;     // copied over growth, from its second reading on where it has more than the
                                 // minimum (its first batch's own allocations come before that)
    bool flattened = false;      // the second half of what it read added under kFlatShare of what the first did
    double shared_left_mb = -1;  // Shared_Dirty at the last reading: the most it can still copy; -1 not read
    double mb_per_s = 0;         // private growth over the readings' time
    bool copying_hint = false;   // unknown for too few readings, but those it has grew with copies
    std::string why;             // for unknown: why; else how the verdict was reached, in words
};

inline constexpr size_t kMinMemoryReadings = 4; // fewer: no rate (unknown, "not enough readings")
inline constexpr double kMinGrowthMb = 8;       // less private growth over the readings: steady
inline constexpr double kCopiedShare = 0.5;     // copied pages at least this share of the growth: copy-on-read
inline constexpr double kFlatShare = 0.25;

CurveJudgement judge_curve(const std::vector<MemoryPoint>& points);

// One worker process's judgement.
struct WorkerMemoryRow {
    uint32_t pid = 0;
    std::string label;
    std::string unit; // "samples" or "batches": what `read` counted
    double read = 0;  // at its last reading
    CurveJudgement curve;
    // Its parent is multiprocessing's forkserver (CPython 3.14's default start method): it shares no page of the
    // training process (the dataset came to it pickled, into memory of its own), only the forkserver's.
    bool from_forkserver = false;
    // Private memory at its first reading after it had read (a reading before may come while it unpickles);
    // -1: none.
    double first_private_mb = -1;
};

struct WorkerMemoryReport {
    std::vector<WorkerMemoryRow> workers; // by pid, at most kMaxRows (the rest counted in left_out)
    size_t left_out = 0;
    size_t copy_on_read = 0, leak_like = 0, steady = 0, unknown = 0;
    bool private_known = true;       // false: the records carried no private memory (made before it was read)
    std::vector<std::string> advice; // what to do where copy-on-read or a leak was found, each a sentence
    static constexpr size_t kMaxRows = 64;
};

// The job's memory limit and its footprint, for the projection; limit 0: not known or none.
struct JobMemory {
    uint64_t limit_bytes = 0;
    double peak_pss_mb = 0; // the job's highest PSS sum in one sweep; 0: never read
};

// Fed the record stream (RecordUsage) and the engine's spans (samples and batches, per process).
class WorkerMemory : private model::RecordHandler {
public:
    void consume(const void* data, size_t len);
    void add(const model::Span& s);
    // An exited process folded into its role's row: judged now (its label from the engine), its data dropped.
    // `processes`: the engine's, for its parent's role (a forkserver).
    void fold(uint32_t pid, const std::map<uint32_t, model::ProcessInfo>& processes, std::string label);
    WorkerMemoryReport finish(const std::map<uint32_t, model::ProcessInfo>& processes, const JobMemory& job);
    // Ends kept while no reading came (a process whose private memory is never read, --pss-interval 0): past it
    // the older half is only counted, as before the next reading (its time is long past).
    static constexpr size_t kMaxPending = 1 << 16;

private:
    void usage(const model::RecordUsage& r) override;
    struct Reading {
        uint64_t ts_ns = 0;
        uint64_t private_kb = 0, anon_kb = 0, shared_dirty_kb = model::kNoPss;
        uint64_t samples = 0, batches = 0; // spans that ended in (previous reading, this one]
    };
    struct Proc {
        std::vector<Reading> readings;            // with private memory, in time order
        std::vector<uint64_t> pending_samples, pending_batches; // ends after the last reading
        uint64_t old_samples = 0, old_batches = 0; // pending ones let go of (kMaxPending): before the next reading
        bool any_sample = false;
        bool any_reading = false;                 // a reading with or without private memory
    };
    void judge(uint32_t pid, Proc& p, const model::ProcessInfo& info, bool from_forkserver, std::string label);
    std::map<uint32_t, Proc> procs_;
    std::vector<WorkerMemoryRow> rows_;
    bool private_missing_ = false, private_seen_ = false;
};

// The advice sentences for a report (set into it by finish).
std::vector<std::string> worker_memory_advice(const WorkerMemoryReport& r, const JobMemory& job);
// The summary JSON's "worker_memory".
nlohmann::ordered_json worker_memory_json(const WorkerMemoryReport& r);
// The HTML report's part: a table of the workers judged, and the advice.
std::string worker_memory_html(const WorkerMemoryReport& r);
// One line per worker where it matters, and the advice (the text summary).
std::vector<std::string> worker_memory_lines(const WorkerMemoryReport& r);

} // namespace lotus::exporter
