// Why the training loop waited: each wait in next() split into causes that add up to it, from the spans of the
// batch it awaited (its worker's samples, ops, loading and collation) and the pass's other batches.
//
// The wait [start, end] for batch B (prepared [b0, b1] by its worker):
//   late start      start..b0 where B began after the loop asked for it (its worker busy or starting), and
//                   the ordinary preparation of a worker's first batch of a pass (no number of workers would
//                   have had it ready sooner: each worker prepares its own batches);
//   hand-over       b1..end where B was ready before the wait ended (the queue and unpickling);
//   the rest overlaps B's preparation. Of it, first what made B slower than its pass's usual batch:
//   slow sample     an outlier sample's time over the median sample (over kOutlierFactor x the median, and its
//                   own work too: time on a CPU where counted, or blocked (I/O); a sample that only waited longer
//                   for a CPU is no slow sample), where few samples of the batch are (else the batch's parts were
//                   slow: an op, loading);
//   op NAME / loading / collation   a part taking over kExcessFactor x its usual share of a batch;
//   and what remains is B's ordinary preparation:
//   too few workers where no later batch of the pass was ready when the wait began (every worker was still
//                   busy: the pipeline cannot keep up), else split over B's ops, loading and collation by their
//                   share of it (B was slower than the batches after it);
//   unsplit         B's samples were not all seen (tracing began inside it);
//   unknown         B's preparation was not seen (prepared before tracing began, or its hand-over not matched).
// The usual figures are the pass's own so far (kMinSamples samples at least), so a replayed record splits alike.
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/quantile_sketch.h"
#include "spans.h"

namespace lotus::model {

enum class WaitCause : uint8_t { LateStart, HandOver, SlowSample, Op, Loading, Collation, TooFewWorkers, Unsplit, Unknown };
const char* wait_cause_key(WaitCause c);  // "late_start", "op", ... (the JSON's)
std::string wait_cause_text(WaitCause c, const std::string& op); // "late start", "op Normalize", ...

struct CausePart {
    WaitCause cause = WaitCause::Unknown;
    std::string op; // WaitCause::Op: its name
    uint64_t ns = 0;
};

// One wait, attributed.
struct WaitRow {
    uint32_t owner = 0, pid = 0; // the training process (owner of the DataLoader) and the loop's pid
    int loader = -1;
    int64_t batch = -1, epoch = -1;
    uint64_t start_ns = 0, end_ns = 0;
    uint32_t worker_pid = 0;  // 0: its batch's preparation not seen
    int worker_id = -1;
    uint64_t prepare_ns = 0;
    bool later_ready = false; // a later batch of its pass was ready when the wait began
    int64_t slowest_sample = -1;
    std::string slowest_path, slowest_part; // the slowest sample's file and its costliest part (an op or "loading")
    uint64_t slowest_ns = 0;
    std::vector<CausePart> parts; // largest first; their ns add up to end_ns - start_ns
    uint64_t ns() const { return end_ns - start_ns; }
};

struct CauseTotal {
    WaitCause cause = WaitCause::Unknown;
    std::string op;
    uint64_t ns = 0;
    uint64_t waits = 0; // waits it was the largest part of
};

class WaitCauses {
public:
    static constexpr double kOutlierFactor = 3.0;   // a sample over 3 x its pass's median...
    static constexpr uint64_t kOutlierMinNs = 2'000'000; // ...and 2 ms over it
    static constexpr double kExcessFactor = 1.5;    // a part over 1.5 x its usual time in a batch of that size...
    static constexpr uint64_t kExcessMinNs = 1'000'000; // ...and 1 ms over it
    static constexpr uint64_t kMinSamples = 20;     // the usual figures need this many samples of the pass
    static constexpr size_t kRows = 1000;           // the longest waits kept as rows

    using Key = std::pair<uint32_t, int>; // (owner, loader), as BatchTracker::stats()

    // Every span the engine emits, in order; a wait is annotated (its cause and the batch's figures in args).
    void see(const Span& s);
    void attribute(Span& wait);
    // A pass in flight at attach found to be `into`'s: its figures are counted there.
    void merge(const Key& from, const Key& into);

    // Per DataLoader of each training process, the causes largest first.
    std::vector<CauseTotal> totals(const Key& k) const;
    std::vector<CauseTotal> totals_of_owner(uint32_t owner) const;
    const std::map<Key, std::map<std::pair<WaitCause, std::string>, CauseTotal>>& all_totals() const { return totals_; }
    // The longest waits, longest first (kRows at most), and how many waits there were in all.
    std::vector<WaitRow> rows() const;
    uint64_t waits() const { return waits_; }

private:
    struct SampleSeen {
        uint64_t id = 0;
        int64_t index = -1;
        uint64_t start = 0, end = 0, load_ns = 0;
        // Its pipeline's and its loading's time on a CPU (-1: not counted), and whether they blocked (a voluntary
        // context switch: I/O, a lock, a sleep) rather than only waiting for a CPU.
        int64_t cpu_ns = -1, load_cpu_ns = -1;
        bool blocked = false, load_blocked = false;
        std::string path;
        std::map<std::string, uint64_t> ops; // op name -> time
        uint64_t ns() const { return end - start + load_ns; }
        // Its own work: each part's time on a CPU where counted and it never blocked, else its wall time.
        uint64_t work() const
        {
            uint64_t load = load_cpu_ns >= 0 && !load_blocked ? static_cast<uint64_t>(load_cpu_ns) : load_ns;
            return load + (cpu_ns >= 0 && !blocked ? static_cast<uint64_t>(cpu_ns) : end - start);
        }
    };
    struct Excess {
        WaitCause cause;
        std::string op;
        uint64_t ns;
    };
    struct BatchSeen {
        uint32_t pid = 0;
        int worker_id = -1;
        uint64_t start = 0, end = 0, collate_ns = 0;
        bool complete = true;          // all its samples seen
        bool first = false;            // its worker's first of a pass known from its start
        std::map<std::string, uint64_t> parts; // op name (or "" for loading) -> time; collation apart
        std::vector<Excess> excess;    // what made it slower than usual
        int64_t slowest = -1;
        std::string slowest_path, slowest_part;
        uint64_t slowest_ns = 0;
    };
    struct ThreadSeen {
        std::map<uint64_t, std::map<std::string, uint64_t>> ops; // sample id -> its ops so far
        std::deque<SampleSeen> samples;
        uint64_t collate_ns = 0, collate_end = 0;
    };
    struct Usual { // a pass's usual figures (per DataLoader of a training process)
        common::QuantileSketch sample_ns, work_ns;
        std::map<std::string, uint64_t> part_ns; // over ordinary samples
        uint64_t samples = 0, batches = 0, collate_ns = 0;
    };
    using Pass = std::pair<Key, int64_t>; // (loader, epoch)

    void sample(const Span& s);
    void batch(const Span& s);
    struct Medians {
        double sample_ns, work_ns; // of the usual sample: its time, and its work (loading and ops)
    };
    static bool outlier(const SampleSeen& x, const Medians& m);
    BatchSeen compose(const Span& s, ThreadSeen& t);
    std::vector<CausePart> split(const Span& wait, const BatchSeen* b, bool later_ready) const;
    void count(const Key& k, const WaitRow& row);
    void keep(WaitRow row);

    std::map<std::pair<uint32_t, uint32_t>, ThreadSeen> threads_;
    std::map<uint64_t, BatchSeen> by_flow_;                         // batches handed over, by their arrow
    std::map<std::pair<uint32_t, uint32_t>, BatchSeen> single_;     // num_workers=0: the thread's last batch
    std::map<Pass, std::map<int64_t, uint64_t>> ready_;             // handed-over batches' ends, not yet awaited
    std::map<Key, Usual> usual_;
    std::map<uint32_t, Pass> worker_pass_; // per worker, the pass of its last batch
    std::map<Key, std::map<std::pair<WaitCause, std::string>, CauseTotal>> totals_;
    std::vector<WaitRow> rows_; // a min-heap on the wait's length
    uint64_t waits_ = 0;
};

} // namespace lotus::model
