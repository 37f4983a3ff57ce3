// What a run was, live or replayed: the trace's otherData and the summary JSON's "run" object
// (docs/trace-format.md lists the keys).
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

namespace lotus::common {
class OutputCuts;
}

namespace lotus::exporter {

struct RunInfo {
    std::string tool; // "lotus-bpf VERSION"
    uint32_t target_pid = 0;
    uint64_t t0_monotonic_ns = 0;
    std::string python, interpreter, layout;
    std::string evaluator_probe; // live runs: "uprobe session" or "uprobe + uretprobe"
    std::string python_probes;   // live runs: "type slots" or "evaluator" (where Python calls were probed)
    std::string python_probes_scope; // live runs: "traced processes" or "system-wide" (which processes trap)
    std::string syscall_programs;    // live runs: "watched syscalls" or "every syscall" (which run BPF)
    std::string kernel;                  // live runs: the kernel's release
    std::vector<std::string> kernel_lacks; // live runs: what that kernel could not give the run (capture::kernel_lacks)
    struct Holds {
        uint64_t children = 0;          // new processes of the traced tree stopped until their probes were in
        double total_ms = 0, max_ms = 0; // fork to SIGCONT
        double attach_ms = 0;            // of total_ms, attaching their probes
        double deadline_ms = 0;          // a hold's bound (--hold-deadline)
        // Children whose probes were not in place before they ran (capture::HoldStats).
        uint64_t shared_memory = 0;    // not held: vfork/posix_spawn children, which exec at once
        uint64_t tracer_not_running = 0, guardian_not_running = 0, refused = 0; // not held: why
        uint64_t released_at_deadline = 0; // continued by the guardian before their probes were in
        uint64_t unseen = 0;               // of the others, those whose probes were attached after they ran
        double unseen_max_ms = 0, unseen_total_ms = 0; // fork to probes attached: an upper bound
        uint64_t spawned_python = 0; // of shared_memory, those held at their exec of the traced interpreter
        // Where the guardian went, per cgroup hierarchy (capture/guardian_cgroup.h): out of the tracer's
        // cgroup into the job's (or an ancestor of it), so that a kill of the tracer's cgroup whole spares it.
        struct GuardianCgroup {
            std::string hierarchy, tracer, job, guardian, why;
            bool stuck = false; // it stayed in the tracer's cgroup, which the job is not in
        };
        std::vector<GuardianCgroup> guardian_cgroups{};
        std::string guardian_stuck{}; // where it is stuck, one sentence; empty where it is not
    };
    std::optional<Holds> holds; // live runs with per-process probes
    std::string stop_reason;
    uint64_t events = 0, lost_events = 0;
    std::optional<uint64_t> events_delivered; // live runs
    long tracer_peak_rss_kb = -1, tracer_cpu_ms = -1;
    // Live runs: loading, verifying and attaching the BPF programs (Session::attach), in wall time and in the
    // tracer's own CPU time (user + system, all its threads: getrusage RUSAGE_SELF at its start and its end).
    struct AttachCost {
        double wall_ms = 0, cpu_ms = 0;
    };
    std::optional<AttachCost> attach;
    uint64_t samples = 0, incomplete_spans = 0;
    unsigned cpus = 0; // CPUs the traced job may run on (its affinity); 0: not known (older record files)
    unsigned resources_interval_ms = 0; // how often /proc was read (--resources-interval); 0: not read
    struct SpanPattern {
        std::string pattern;
        uint64_t calls = 0;
        bool complete = false; // every call was seen (false where CPython 3.11+ may have run some inline)
    };
    std::vector<SpanPattern> span_patterns; // with --span
    struct ProcessEnd {
        uint32_t pid = 0;
        std::string label, how;
        int signal = 0, status = -1;
        double at_s = 0;
    };
    std::vector<ProcessEnd> process_ends;
    std::vector<std::string> output_failures;
    // Outputs cut at the disk reserve (--disk-reserve): they keep what they had then, completed.
    struct Cut {
        std::string output, path, why; // output: as the user named it ("-o", "--record")
        double at_s = 0;
    };
    std::vector<Cut> outputs_cut;
    struct Native {
        uint64_t functions_probed = 0, probe_links = 0;
        double attach_s = 0;
        std::string sampling_event;
        unsigned sampling_stack_frames = 0; // --sample-stack; 0 without sampling
        std::string sampling_scope;          // "threads" (each traced thread's own events), "cpus", "none"
        uint64_t sampled_elsewhere = 0;      // sampling interrupts of threads outside the traced processes
        std::vector<std::string> specs_unmatched;
        // "library:function" selected but not probed: no return instruction of its own was found (docs/native-map.md)
        std::vector<std::string> without_returns;
        std::string sampling_unwind; // how callers were found: "cfi", "fp", "none" (the leaf alone, or no sampling)
        uint64_t unwound_samples = 0, unwound_callers = 0; // cfi: samples with a hidden leaf walked, callers found
    };
    std::optional<Native> native; // --native-map, --native
    // Probed native calls that left their function without its return instructions (an exception, a tail call):
    // no span (the engine's native_unended; known on replay too).
    uint64_t native_calls_unended = 0;
    // What BPF could not record, by failure path (capture/bpf_failures.h): (name, count, meaning) of each; empty
    // on replay (the record file does not keep them).
    struct BpfFailure {
        std::string name;
        uint64_t count = 0;
        std::string meaning;
    };
    std::vector<BpfFailure> bpf_failures;
    // A library whose probes went live after a traced process had loaded it: that process's calls into it in
    // between are not in the trace. during_work: the process had begun the job's work (a span) before then.
    struct NativeLate {
        uint32_t pid = 0;
        std::string label, library;
        double loaded_s = 0, probed_after_ms = 0;
        bool during_work = false;
    };
    std::vector<NativeLate> native_late;
    // Traced processes that ran a CPython interpreter other than the probed file: their Python calls are not seen.
    struct OtherInterpreter {
        uint32_t pid = 0;
        std::string label, interpreter;
    };
    std::vector<OtherInterpreter> other_interpreters;
    // Launch mode: processes of the command that ran CPython outside the traced tree, so not traced.
    struct UntracedPython {
        uint32_t pid = 0;
        std::string comm, interpreter;
    };
    std::vector<UntracedPython> untraced_pythons;
    // --trainer-calls (live runs): the mode, and why a training process's object calls could not be taken away
    // (empty where they could); per process whose object calls went unprobed, from when (s after t0) and until
    // when (-1: the end), the next() calls of its loaders without workers begun in between and the calls cut.
    std::string trainer_calls, trainer_calls_unavailable;
    struct CallsUnprobed {
        uint32_t pid = 0;
        std::string label;
        double from_s = 0, until_s = -1;
        uint64_t batches_unprobed = 0, calls_cut = 0;
    };
    std::vector<CallsUnprobed> object_calls_unprobed;
    // --cpus/--memory/--cpuset (launch mode): what was asked, the cgroup it ran in, and what the kernel counted.
    struct Limits {
        double cpus = 0;
        uint64_t memory_bytes = 0;
        std::string cpuset, cgroup; // cgroup: "v1" or "v2"
        std::vector<std::pair<std::string, uint64_t>> read_bps, write_bps; // device, bytes per second
        bool have_cpu = false, have_memory = false, have_io = false;
        uint64_t io_read_bytes = 0, io_write_bytes = 0; // on the limited devices
        uint64_t periods = 0, throttled_periods = 0, throttled_ns = 0;
        uint64_t memory_peak_bytes = 0, memory_limit_hits = 0, oom_kills = 0;
        size_t left_running = 0; // processes still running when tracing stopped: moved out, no longer limited
    };
    std::optional<Limits> limits;
    // The traced job's own cgroup, as its processes' RecordCgroup said (attach or launch, lotus-bpf's --cpus cgroup
    // or the job's own): each limit the tightest over its processes and their cgroups' ancestors; a limit whose
    // file could not be read is not known (its have_ false). None: no process's cgroup was read.
    struct CgroupLimits {
        std::string path, version; // version: "v1", "v2", "v1 and v2"
        size_t cgroups = 1;        // distinct cgroups its processes were in
        bool have_quota = false;
        double quota_cpus = 0;     // 0: no quota
        int64_t quota_us = -1;
        uint64_t period_us = 0;
        bool have_cpuset = false;
        unsigned cpuset_cpus = 0;
        std::string cpuset;
        bool have_memory = false;
        uint64_t memory_limit = 0; // 0: no limit
        bool have_throttle = false;
        uint64_t periods = 0, throttled_periods = 0;
        double throttled_s = 0;
    };
    std::optional<CgroupLimits> cgroup;
    // The CPUs the job may use, as the advice counts them: the smallest of the CPUs it may run on (its affinity,
    // `cpus`), a --cpus limit, its cgroup's quota and cpuset; 0: none known. cpus_from names the one that set it.
    double job_cpus = 0;
    std::string cpus_from;
    // Ops whose calls were seen running other objects' calls in turn (model::Engine::containers): classes that play
    // a pipeline's role without --pipeline naming them, each one op.
    struct Container {
        std::string op;
        std::vector<std::string> callees;
        uint64_t calls_seen = 0;
        uint32_t pid = 0;
        bool in_pipeline = false;
    };
    std::vector<Container> containers;
    // Several nodes' record files in one reconstruction: each node, its file, where its clock was placed (its
    // CLOCK_REALTIME at start against the first's) and, where its process ids collided with an earlier node's,
    // the multiple of model::kNodeIdStride they were moved by (0: kept).
    struct Node {
        std::string name, record;
        double clock_offset_ms = 0;
        uint32_t ids_moved = 0;
    };
    std::vector<Node> nodes;
    // The summary's native map and counters tables (export/summary.h encodes them), when there are any.
    std::string native_map_json, counters_json;
};

// Sets r.outputs_cut to the outputs cut so far in this process (output_file.h), their times after t0_ns.
void take_output_cuts(RunInfo& r, const common::OutputCuts& cuts, uint64_t t0_ns);

// The JSON object, keys in alphabetical order.
nlohmann::ordered_json run_json(const RunInfo& r);
// Its members as text, without the braces (the trace's otherData).
std::string run_json_members(const RunInfo& r);

// The summary's note on the children whose probes were not in place before they ran; empty if there were none.
std::string holds_note(const RunInfo::Holds& h);

} // namespace lotus::exporter
