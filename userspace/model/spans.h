// What the reconstruction engine produces: spans and what it learned about processes.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace lotus::model {

// A span arg's value, typed; how it is written is the exporters' business.
struct DurationNs {
    uint64_t ns = 0;
};
using ArgValue = std::variant<int64_t, bool, std::string, DurationNs>;

enum class SpanKind {
    Sample,   // one pipeline (Compose) call: one sample through its ops
    Op,       // one op called by the pipeline
    Batch,    // a batch prepared by a worker (or by the main process when num_workers=0)
    Loader,   // a sample's loading (file read + decode): __getitem__ up to the pipeline call
    Collate,  // a batch's collation: last sample's end to the batch's hand-over
    Wait,     // the training loop blocked in next(iterator) for a batch
    Consumed, // instant: the training loop got the batch
    Py,       // a call of a function named by --span
    Native,   // a call of a probed native function (--native)
};

const char* category(SpanKind k);

// The name an op's (or a --span function's) row goes by in the summary, the counters table and the native map:
// its own, or "NAME (op)" where its own is one of the names the parts that are not ops go by ("loader",
// "collate", "sample", "wait", "batch", ...), so that no row reads as a row of another kind (also in top's table). Code tells rows apart by
// their kind, never by this name.
std::string op_row_name(std::string name);
bool op_row_is_name(std::string_view name); // op_row_name(name) == name

// Per-thread counters over a span (exact: kernel per-task counts and on-CPU time), and the perf-event
// counters chosen with --counters (named by the session, in that order).
constexpr unsigned kMaxPerfCounters = 4;
struct Counters {
    uint64_t cpu_ns = 0, minor_faults = 0, major_faults = 0, voluntary_cs = 0, involuntary_cs = 0;
    uint64_t perf[kMaxPerfCounters] = {};
};

struct Span {
    SpanKind kind = SpanKind::Op;
    std::string name;     // "sample" for samples; the op's class for ops; e.g. "batch 3" for batches
    uint32_t pid = 0, tid = 0;
    uint64_t start_ns = 0, end_ns = 0; // CLOCK_MONOTONIC, from the events
    int64_t sample = -1;  // dataset index when known (samples, ops, loaders)
    uint64_t sample_id = 0; // engine-wide number of the sample this span belongs to (1-based), 0: none
    uint32_t depth = 0;   // evaluation depth of the entry event, to trace a span back to its events
    // DataLoader spans (samples, ops, loaders, collates, batches, waits): the process whose training loop the
    // data is for (a rank, or the main process; 0 when unknown) and that process's DataLoader number (-1).
    uint32_t owner = 0;
    int loader = -1;
    std::string container; // ops of a container transform (RandomApply...): its class
    // Further args (batch, epoch, worker, path, delay_ms, out_of_order...).
    std::vector<std::pair<std::string, ArgValue>> args;
    uint64_t flow_out = 0; // nonzero: a flow arrow starts at this span...
    uint64_t flow_in = 0;  // ...and ends at the span carrying the same id here
    bool has_counters = false; // ops and samples
    Counters counters;

    static Span make(SpanKind kind, std::string name, uint32_t pid, uint32_t tid, uint64_t start_ns, uint64_t end_ns)
    {
        Span s;
        s.kind = kind;
        s.name = std::move(name);
        s.pid = pid;
        s.tid = tid;
        s.start_ns = start_ns;
        s.end_ns = end_ns;
        return s;
    }
};

struct ProcessInfo {
    uint32_t pid = 0;
    uint32_t parent = 0;
    bool root = false;
    int worker_id = -1;   // DataLoader worker id, when recovered
    int rank = -1;        // the rank of a training process (torch.multiprocessing.spawn's i), when known
    int env_rank = -1;    // RANK in its environment when it started (a DataLoader worker may inherit it too)
    int local_rank = -1;  // LOCAL_RANK there (torchrun: its index on its node)
    int world_size = -1;  // WORLD_SIZE there
    std::string node;     // the node it ran on, where a report has several (else empty)
    std::string helper;   // a helper's role, as its command line says (framework::HelperRow: "forkserver"), or ""
    bool consumer = false; // it iterates DataLoaders (a training loop: the main process, or a rank)
    bool worker = false;   // it prepared DataLoader batches (read a task from a DataLoader's index queue)
    uint32_t owner = 0;    // a worker: the process it prepares batches for, when known
    uint64_t samples = 0; // completed sample spans
    uint64_t batches = 0; // batches prepared
    uint64_t busy_ns = 0; // time inside batch spans
    uint64_t first_ns = 0, last_ns = 0; // first and last event seen from it
    uint64_t first_span_ns = 0; // the start of its first span of the job's work (any kind but native); 0: none
    int loader = -1;      // a worker: which DataLoader of its owner (numbered in order of first use); -1: unknown
    bool exited = false;
    int exit_status = -1;  // as the kernel keeps it (exit code << 8, or the killing signal | 0x80 core); -1 unknown
    uint64_t exit_ns = 0;
    bool preexisting = false; // alive when tracing began (its fork was not seen)
    // --trainer-calls (RecordObjectCalls): when its object calls stopped being probed and when they were probed
    // again (0: never); next() calls of its loaders without workers begun in between (those batches' ops may be
    // missing); calls in flight when the probe went (their ends never came: not in the trace).
    uint64_t calls_off_ns = 0, calls_on_ns = 0, batches_unprobed = 0, calls_cut = 0;
    uint64_t calls_kept_ns = 0; // it iterated a loader with workers while its calls could not be taken away: when
    uint32_t calls_off_mode = 0; // the stop's RecordObjectCalls::mode (kCallsAuto, kCallsOff; 0 unknown)
    std::set<uint32_t> feeder_threads; // threads that sent DataLoader queue messages (multiprocessing's feeders)
    std::map<uint32_t, std::string> thread_names; // per thread, its name (comm) as the kernel last had it
    // Exited processes of the same role folded into this one (process_fold.h), their figures added to its own:
    // samples, batches, busy_ns and seen_ns() count them all; their pids, the first kShownFolded of them.
    uint32_t folded = 0;
    uint64_t folded_seen_ns = 0;
    std::vector<uint32_t> folded_pids;
    static constexpr size_t kShownFolded = 8;
    uint32_t processes() const { return 1 + folded; }
    // Time from the first event to the last, summed over the processes it stands for.
    uint64_t seen_ns() const { return (last_ns > first_ns ? last_ns - first_ns : 0) + folded_seen_ns; }
    // A training process's global rank: RANK from its environment, else spawn's index where there is one node
    // (spawn's index is local to its node); -1 unknown.
    int global_rank() const { return consumer && env_rank >= 0 ? env_rank : node.empty() ? rank : -1; }
    // A training process's rank: spawn's index, else RANK from its environment; -1 unknown.
    int known_rank() const { return rank >= 0 ? rank : consumer ? env_rank : -1; }
};

// A span's integer arg `name`; `none` where it has none (or not an integer).
int64_t int_arg(const Span& s, const char* name, int64_t none = -1);

// "killed by SIGKILL", "killed by SIGSEGV (core dumped)", "exited with status 3"; empty for a clean exit (0) and
// for a process not seen to exit.
std::string how_it_ended(const ProcessInfo& p);
int exit_signal(const ProcessInfo& p);       // the killing signal, 0 if none
int exit_code(const ProcessInfo& p);         // the exit status when it exited, -1 if killed or unknown

// "main", "rank 1", "trainer" (a training process without a known rank), "worker 0" (prefixed with its
// owner's label where there are several training processes), "worker ?" (its id not recovered), "child".
std::string process_label(const std::map<uint32_t, ProcessInfo>& processes, uint32_t pid);

// The pids a process's row stands for: "4242", or with processes folded into it "4242,4250,4258,+40".
std::string pid_list(const ProcessInfo& p);

} // namespace lotus::model
