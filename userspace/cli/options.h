// A run's options (Options): what the command line (command_line.h, option_groups.h) fills and every part of a run
// reads: the session, replay, the reconstruction, the outputs and their sinks. Its own header, so that those
// include it, not the session (session.h) that runs them.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "capture/perf_events.h"
#include "common/output_file.h"
#include "launch/cgroup.h"
#include "metrics/shared_registry.h"
#include "model/capture_requests.h"

namespace lotus::cli {

// --sample-unwind: how a native-map sample's callers are found: a copy of the stack unwound in user space through
// the libraries' .eh_frame (cfi), or a frame-pointer walk in BPF (fp).
enum class SampleUnwind { Cfi, Fp };
inline const char* sample_unwind_name(SampleUnwind u) { return u == SampleUnwind::Fp ? "fp" : "cfi"; }

struct Options {
    std::optional<int> pid;
    std::vector<std::string> command; // launch mode
    std::string output = "lotus-trace.json"; // empty: no trace file (the record and report subcommands)
    bool print_summary = true;                // false: the record and export subcommands
    std::string summary_json; // also write the summary as JSON here
    std::string html;         // also write the HTML report here
    std::string speedscope;   // also write the speedscope file here
    std::string resources_csv; // also write the resource readings as CSV here
    std::map<std::string, std::string> file_sinks; // the table's output files (sinks.def) given: flag -> file
    unsigned resources_interval_ms = 100; // read each traced process's /proc this often; 0: never
    // A new child held for its probes is continued after this, whatever the tracer does; 0: the kernel's default
    // (capture::Probe::hold_deadline_ms).
    unsigned hold_deadline_ms = 0;
    bool net = false; // --net: count network bytes at the readings (the socket tracepoints: every socket call of the machine)
    int pss_interval_ms = -1; // PSS at the readings this often; -1: auto (within kPssBudget of the CPUs); 0: never
    double duration_s = 0; // 0: until Ctrl-C, SIGTERM or the target's exit
    double stuck_after_s = 0; // --stuck-after: a stuck process's threshold; 0: its own (model::StuckWatch)
    std::vector<std::string> pipeline_classes;
    std::vector<std::string> spans; // --span
    std::string record;     // --record: also write the raw event stream here
    double disk_reserve_pct = common::kDefaultDiskReserve; // --disk-reserve: free space (% of each output's file
                                                             // system) no output takes, the record file's too
    std::string replay;     // --replay: reconstruct from a record file instead of tracing
    std::vector<std::string> replay_more; // report/export of several nodes' record files: the ones after the first
    std::string rules_file;         // --rules: more pipelines and spans from a JSON file
    bool all_calls = false;         // see every Python call (launch mode, CPython 3.12+ via PYTHONPERFSUPPORT)
    model::TrainerCalls trainer_calls = model::TrainerCalls::Auto; // --trainer-calls
    bool quiet = false; // no status line
    bool top = false;   // `lotus-bpf top`: a live table on the terminal instead of outputs
    launch::Limits limits; // --cpus, --memory, --cpuset: launch mode only
    bool native_map = false;          // sampling map + built-in native function probes
    std::vector<std::string> native;  // --native LIBGLOB:SYMBOLGLOB
    unsigned sample_freq = 99;        // Hz, for the native map (docs/native-map.md: what a sample costs)
    unsigned sample_stack = 8; // user-stack frames per sample (LOTUS_STACK_DEPTH at most): 1 the leaf, more with callers
    SampleUnwind sample_unwind = SampleUnwind::Cfi;
    std::vector<capture::CounterSpec> counters; // --counters, as asked (the machine's choice is the session's); empty: none
    std::string metrics;  // --metrics HOST:PORT: serve Prometheus metrics there while tracing
    std::string node;     // --node: this machine's name in the metrics and the record file (default: hostname)
    // lotus-bpf agent: its registry (this run serves no endpoint of its own), the labels of this job's series, and
    // the job's metrics handed over when the run ends (the agent keeps them a while for the last scrapes).
    std::shared_ptr<metrics::SharedRegistry> metrics_registry;
    std::map<std::string, std::string> metrics_labels;
    std::function<void(std::shared_ptr<void>)> metrics_handoff; // (a metrics::PipelineMetrics)
    std::function<void(const std::string&)> on_failure; // the agent: a failed run's reason, said by it, not here
    bool coarse = false;  // trace file: batches, waits and flows only
    double window_start_s = 0, window_end_s = 0; // trace file: spans starting in [start, end) s; end 0 = open
};

} // namespace lotus::cli
