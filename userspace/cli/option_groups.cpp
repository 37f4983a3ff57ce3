// The command line's shared parts: the validators and the option groups (option_groups.h).
#include "option_groups.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "capture/perf_events.h"
#include "lotus_abi.h"
#include "launch/cgroup.h"
#include "elf/native_functions.h"
#include "metrics/endpoint.h"

namespace lotus::cli::cmdline {

// Empty names and patterns are mistakes (a shell variable that was not set), never "everything" or "nothing".
const CLI::Validator kNonEmpty([](std::string& v) { return v.empty() ? std::string("must not be empty") : std::string(); },
                               "NONEMPTY", "NonEmpty");

// nan and inf parse as numbers and would make a duration that never ends.
const CLI::Validator kSeconds(
    [](std::string& v) {
        char* end = nullptr;
        double d = strtod(v.c_str(), &end);
        return !v.empty() && !*end && std::isfinite(d) && d >= 0 ? std::string()
                                                                 : "wants a number of seconds >= 0, not '" + v + "'";
    },
    "SECONDS", "Seconds");
// --record-max-mb: a size in MiB, fractions allowed, above 0 (and nan, inf refused).
const CLI::Validator kMebibytes(
    [](std::string& v) {
        char* end = nullptr;
        double d = strtod(v.c_str(), &end);
        return !v.empty() && !*end && std::isfinite(d) && d > 0 && d < 1e12
                   ? std::string()
                   : "wants a size in MiB greater than 0, not '" + v + "'";
    },
    "MB", "Mebibytes");
const CLI::Validator kPid(
    [](std::string& v) {
        char* end = nullptr;
        long n = strtol(v.c_str(), &end, 10);
        return !v.empty() && !*end && n > 0 && n <= 0x3fffffff ? std::string()
                                                               : "wants a process id (a positive integer), not '" + v + "'";
    },
    "PID", "Pid");

// Counter and native specs are checked when the command line is read: their errors are usage errors.
const CLI::Validator kCounters(
    [](std::string& v) {
        try {
            lotus::capture::parse_counters(v == "default" ? lotus::capture::default_counters() : v);
        } catch (const std::exception& e) {
            return std::string(e.what());
        }
        return std::string();
    },
    "COUNTERS", "Counters");
const CLI::Validator kNativeSpec(
    [](std::string& v) {
        try {
            lotus::elf::parse_native_spec(v);
        } catch (const std::exception& e) {
            return std::string(e.what());
        }
        return std::string();
    },
    "LIB:SYM", "NativeSpec");

const CLI::Validator kBindAddress(
    [](std::string& v) {
        try {
            lotus::metrics::parse_bind_address(v);
        } catch (const std::exception& e) {
            return std::string(e.what());
        }
        return std::string();
    },
    "HOST:PORT", "BindAddress");

// --pss-interval: "auto" or milliseconds (0: never).
const CLI::Validator kPssInterval(
    [](std::string& v) {
        if (v == "auto")
            return std::string();
        char* end = nullptr;
        long ms = strtol(v.c_str(), &end, 10);
        return !v.empty() && *end == 0 && ms >= 0 && ms <= 600000 ? std::string()
                                                                  : std::string("not 'auto' or 0-600000 ms: ") + v;
    },
    "auto|MS", "PssInterval");


const CLI::Validator kBytes(
    [](std::string& v) {
        try {
            lotus::launch::parse_bytes(v);
        } catch (const std::exception& e) {
            return std::string(e.what());
        }
        return std::string();
    },
    "SIZE", "Bytes");

// A tracing run's option checks: --net counts at the resource readings; --cpus/--memory/--cpuset: the job
// lotus-bpf launches runs in a cgroup it makes, an attached one's is not its own.
void check_limits(Parsed& p, bool attach)
{
    if (!p.memory.empty())
        p.opts.limits.memory_bytes = lotus::launch::parse_bytes(p.memory);
    for (auto [given, into, flag] : {std::tuple{&p.read_bps, &p.opts.limits.read_bps, "--device-read-bps"},
                                     std::tuple{&p.write_bps, &p.opts.limits.write_bps, "--device-write-bps"}})
        for (const auto& text : *given) {
            try {
                into->push_back(lotus::launch::parse_device_rate(text));
            } catch (const std::invalid_argument& e) {
                throw CLI::ValidationError(fmt::format("{}: {}", flag, e.what()));
            }
        }
    if (p.opts.net && p.opts.resources_interval_ms == 0)
        throw CLI::ValidationError("--net counts network bytes at the resource readings: not with --resources-interval 0");
    if (attach && p.opts.limits.any())
        throw CLI::ValidationError("--cpus, --memory, --cpuset and the --device-*-bps limits need launch mode (-- "
                                   "COMMAND): the cgroup of a process lotus-bpf did not start is not its to change");
}

// What decides which spans exist: the engine's rules (used live and on replay).
std::vector<CLI::Option*> add_rule_options(CLI::App* app, Parsed& p)
{
    return {app->add_option("--pipeline", p.opts.pipeline_classes,
                            "class name glob whose __call__ plays Compose's role (repeatable; Compose is built in)")
                ->check(kNonEmpty),
            app->add_option("--span", p.opts.spans,
                            "trace every call of these Python functions as spans: QUALNAME_GLOB or "
                            "FILE_GLOB:QUALNAME_GLOB (repeatable)")
                ->check(kNonEmpty),
            app->add_option("--rules", p.opts.rules_file,
                            "pipelines, spans and the torch/torchvision knowledge from a JSON file "
                            "(schemas/rules.schema.json; `lotus-bpf rules` writes the built-in one)")
                ->check(kNonEmpty)};
}

CLI::Option* add_duration_option(CLI::App* app, Parsed& p)
{
    return app
        ->add_option("-d,--duration", p.opts.duration_s, "stop after this many seconds (default: until Ctrl-C, "
                                                         "SIGTERM or the target exits)")
        ->check(kSeconds);
}

CLI::Option* add_resources_interval_option(CLI::App* app, Parsed& p)
{
    return app
        ->add_option("--resources-interval", p.opts.resources_interval_ms,
                     "read each traced process's CPU, memory, storage I/O and context switches from /proc every MS "
                     "milliseconds (0: never)")
        ->capture_default_str()
        ->check(CLI::Range(0, 60000));
}

CLI::Option* add_net_flag(CLI::App* app, Parsed& p)
{
    return app->add_flag("--net", p.opts.net,
                         "also count each traced process's network bytes (internet sockets' payload) at the resource "
                         "readings, from the kernel's socket tracepoints: they run at every socket send and receive "
                         "of the machine, other processes' too (docs/limits.md), so this is off by default");
}

CLI::Option* add_trainer_calls_option(CLI::App* app, Parsed& p)
{
    using M = lotus::model::TrainerCalls;
    return app
        ->add_option_function<std::string>(
            "--trainer-calls",
            [&p](const std::string& v) { p.opts.trainer_calls = v == "on" ? M::On : v == "off" ? M::Off : M::Auto; },
            "probe a training process's object calls: auto (not while it iterates only DataLoaders with workers, so "
            "that its model's forward pays no trap; again from when it iterates one without), on (always), off (not "
            "from its first DataLoader)")
        ->default_str("auto")
        ->check(CLI::IsMember({"auto", "on", "off"}));
}

// How to capture: target, duration, probes.
CLI::Option* add_capture_options(CLI::App* app, Parsed& p)
{
    auto* pid_opt = app->add_option("-p,--pid", p.pid, "attach to this running Python process and its children")
                        ->check(kPid);
    add_duration_option(app, p);
    add_rule_options(app, p);
    app->add_option("--stuck-after", p.opts.stuck_after_s,
                    "name a process of the job stuck (stderr, the status line, lotus_stuck_processes) when, inside a "
                    "batch or a sample, it ends no span for this many seconds ('3' or '3s'; default: 10 x its median "
                    "step, at least 10 s)")
        ->transform([](std::string v) {
            if (!v.empty() && v.back() == 's')
                v.pop_back();
            return v;
        })
        ->check(kSeconds);
    app->add_flag("--all-calls", p.opts.all_calls,
                  "see every Python call, also those made from Python (launch mode; CPython 3.10, or 3.12+ through "
                  "PYTHONPERFSUPPORT=1); costs a trap per call");
    app->add_flag("--native-map", p.opts.native_map,
                  "sample every traced thread (perf event) and map each op's time to native functions; probe the "
                  "built-in native set (JPEG decode, torch ops) as spans");
    app->add_option("--native", p.opts.native,
                    "also probe these native functions as spans: 'LIBGLOB:SYMBOLGLOB' (repeatable; implies "
                    "--native-map)")
        ->check(kNativeSpec);
    app->add_option("--sample-freq", p.opts.sample_freq,
                    "native map sampling frequency in Hz, per traced thread (0: no sampling)")
        ->capture_default_str()
        ->check(CLI::Range(0, 100000));
    app->add_option("--sample-stack", p.opts.sample_stack,
                    "user-stack frames per native-map sample: 1 the leaf alone (as perf record without -g), up to 8 "
                    "with its callers (see --sample-unwind)")
        ->capture_default_str()
        ->check(CLI::Range(1, LOTUS_STACK_DEPTH));
    app->add_option_function<std::string>(
           "--sample-unwind",
           [&p](const std::string& v) { p.opts.sample_unwind = v == "fp" ? SampleUnwind::Fp : SampleUnwind::Cfi; },
           "how a sample's callers are found: 'cfi' (a copy of the stack, unwound by lotus-bpf through the "
                    "libraries' .eh_frame where the leaf has no symbol; its named callers are kept) or 'fp' (a "
                    "frame-pointer walk in the sampling interrupt, as perf record -g)")
        ->default_str("cfi")
        ->check(CLI::IsMember({"cfi", "fp"}));
    app->add_option_function<std::string>(
           "--counters",
           [&p](const std::string& v) {
               p.opts.counters = lotus::capture::parse_counters(v == "default" ? lotus::capture::default_counters() : v);
           },
           "perf-event counters per op: 'default' (cycles,instructions,cache-misses,branch-misses) or a "
                    "comma list; where no PMU counts them, each thread's task-clock, faults and context-switches (its own "
                    "accounting, no perf event)")
        ->check(kCounters);
    add_resources_interval_option(app, p);
    add_net_flag(app, p);
    app->add_option_function<std::string>(
           "--pss-interval",
           [&p](const std::string& v) { p.opts.pss_interval_ms = v == "auto" ? -1 : std::stoi(v); },
           "read each process's proportional memory (PSS: a walk of its page tables, 5-15 ms for a process that "
           "mapped torch here) every MS ms at the resource readings; auto: every 2 s, or less often so that the "
           "walks take at most 0.1 % of the time of the CPUs the job may use; 0: never")
        ->default_str("auto")
        ->check(kPssInterval);
    app->add_option("--cpus", p.opts.limits.cpus, "launch mode: run the job limited to this many CPUs' time (2.5: "
                                                  "250 ms per 100 ms), in a cgroup lotus-bpf makes and removes")
        ->check(CLI::Range(0.01, 4096.0));
    app->add_option("--memory", p.memory, "launch mode: limit the job's memory (4G, 512M...): the kernel's OOM killer "
                                          "acts past it, as in a container")
        ->check(kBytes);
    app->add_option("--cpuset", p.opts.limits.cpuset, "launch mode: run the job on these CPUs only (0-1,3)")
        ->check(kNonEmpty);
    app->add_option("--device-read-bps", p.read_bps, "launch mode: limit the job's reads from a disk, DEVICE:RATE "
                                                     "(/dev/sda:10M per second; repeatable)");
    app->add_option("--device-write-bps", p.write_bps, "launch mode: limit the job's writes to a disk, DEVICE:RATE "
                                                       "(repeatable)");
    app->add_option("--hold-deadline", p.opts.hold_deadline_ms,
                    "a new process of the job is held at its fork until its probes are in, at most this many ms: "
                    "then it runs (counted and said in the summary), whatever becomes of lotus-bpf (default 500; "
                    "2000 on kernels before 6.10, where each of its probes is a perf event placed in turn)")
        ->check(CLI::Range(1, 60000));
    add_trainer_calls_option(app, p);
    app->add_option("--metrics", p.opts.metrics,
                    "serve Prometheus metrics at http://HOST:PORT/metrics while tracing (:9464 binds 127.0.0.1; "
                    "0.0.0.0:9464 every interface); docs/metrics.md")
        ->check(kBindAddress);
    app->add_option("--node", p.opts.node, "this machine's name in the metrics and the record file (default: its "
                                           "hostname)")
        ->check(kNonEmpty);
    app->add_flag("-q,--quiet", p.opts.quiet, "no live status line");
    app->add_option("command", p.opts.command, "launch mode: the command to run and trace (after --)");
    app->positionals_at_end();
    return pid_opt;
}

// Every subcommand that writes files.
CLI::Option* add_disk_reserve_option(CLI::App* app, Parsed& p)
{
    return app->add_option("--disk-reserve", p.opts.disk_reserve_pct,
                    "keep this much of each output's file system free (percent of its size; 0: none): an output "
                    "that would take it lower stops there, completed as a valid file (the trace and record file), "
                    "and the summary says so")
        ->capture_default_str()
        ->check(CLI::Range(0.0, 99.0));
}

void add_trace_file_options(CLI::App* app, Parsed& p)
{
    app->add_flag("--coarse", p.opts.coarse, "trace file: only batches, waits and their arrows (the summary keeps all)");
    app->add_option("--window", p.window, "trace file: only spans starting in START:END seconds after tracing began "
                                          "(END may be empty)");
}

void add_file_sink_options(CLI::App* app, Options& opts)
{
    // Only a file given makes an entry: the sink's presence in the map is the option's.
#define LOTUS_FILE_SINK(name, flag, gzip_by_name, help)                                                               \
    app->add_option_function<std::string>(flag, [&opts](const std::string& file) { opts.file_sinks[flag] = file; },   \
                                          help)                                                                       \
        ->check(kNonEmpty);
#include "sinks.def"
#undef LOTUS_FILE_SINK
}

void parse_window(Parsed& p)
{
    if (p.window.empty())
        return;
    auto& o = p.opts;
    auto colon = p.window.find(':');
    char* end = nullptr;
    std::string a = p.window.substr(0, colon), b = colon == std::string::npos ? "" : p.window.substr(colon + 1);
    o.window_start_s = a.empty() ? 0 : strtod(a.c_str(), &end);
    bool bad = colon == std::string::npos || (!a.empty() && *end);
    if (!b.empty()) {
        o.window_end_s = strtod(b.c_str(), &end);
        bad |= *end || o.window_end_s <= o.window_start_s;
    }
    if (bad || o.window_start_s < 0 || !std::isfinite(o.window_start_s) || !std::isfinite(o.window_end_s))
        throw CLI::ValidationError("--window wants START:END in seconds, e.g. 10:20 or 5:");
}

} // namespace lotus::cli::cmdline
