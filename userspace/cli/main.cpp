// lotus-bpf: trace the data-preprocessing pipeline of a running PyTorch job from outside the process.
// One step: lotus-bpf --pid PID (or -- CMD) traces, writes the Chrome trace and prints the summary.
// Like perf: `record` keeps the raw event stream, `export` and `report` reconstruct it offline.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <tuple>
#include <vector>

#include "capture/guardian.h"
#include "capture/perf_events.h"
#include "lotus_abi.h"
#include "agent.h"
#include "diff.h"
#include "dump.h"
#include "export/output_file.h"
#include "probes.h"
#include "rules_file.h"
#include "sweep.h"
#include "session.h"
#include "launch/cgroup.h"
#include "elf/native_functions.h"
#include "metrics/endpoint.h"

namespace {

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

struct Parsed {
    lotus::cli::Options opts;
    int pid = 0;
    std::string window, memory;
    std::vector<std::string> read_bps, write_bps; // DEVICE:RATE
};

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
void add_rule_options(CLI::App* app, Parsed& p)
{
    app->add_option("--pipeline", p.opts.pipeline_classes,
                    "class name glob whose __call__ plays Compose's role (repeatable; Compose is built in)")
        ->check(kNonEmpty);
    app->add_option("--span", p.opts.spans,
                    "trace every call of these Python functions as spans: QUALNAME_GLOB or FILE_GLOB:QUALNAME_GLOB "
                    "(repeatable)")
        ->check(kNonEmpty);
    app->add_option("--rules", p.opts.rules_file,
                    "pipelines, spans and the torch/torchvision knowledge from a JSON file (schemas/rules.schema.json; "
                    "`lotus-bpf rules` writes the built-in one)")
        ->check(kNonEmpty);
}

// How to capture: target, duration, probes.
CLI::Option* add_capture_options(CLI::App* app, Parsed& p)
{
    auto* pid_opt = app->add_option("-p,--pid", p.pid, "attach to this running Python process and its children")
                        ->check(kPid);
    app->add_option("-d,--duration", p.opts.duration_s, "stop after this many seconds (default: until Ctrl-C, "
                                                        "SIGTERM or the target exits)")
        ->check(kSeconds);
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
    app->add_option("--sample-unwind", p.opts.sample_unwind,
                    "how a sample's callers are found: 'cfi' (a copy of the stack, unwound by lotus-bpf through the "
                    "libraries' .eh_frame where the leaf has no symbol; its named callers are kept) or 'fp' (a "
                    "frame-pointer walk in the sampling interrupt, as perf record -g)")
        ->capture_default_str()
        ->check(CLI::IsMember({"cfi", "fp"}));
    app->add_option("--counters", p.opts.counters,
                    "perf-event counters per op: 'default' (cycles,instructions,cache-misses,branch-misses) or a "
                    "comma list; where no PMU counts them, each thread's task-clock, faults and context-switches (its own "
                    "accounting, no perf event)")
        ->check(kCounters);
    app->add_option("--resources-interval", p.opts.resources_interval_ms,
                    "read each traced process's CPU, memory, storage I/O and context switches from /proc every MS "
                    "milliseconds (0: never)")
        ->capture_default_str()
        ->check(CLI::Range(0, 60000));
    app->add_flag("--net", p.opts.net,
                  "also count each traced process's network bytes (internet sockets' payload) at the resource "
                  "readings, from the kernel's socket tracepoints: they run at every socket send and receive of the "
                  "machine, other processes' too (docs/limits.md), so this is off by default");
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
    app->add_option("--trainer-calls", p.opts.trainer_calls,
                    "probe a training process's object calls: auto (not while it iterates only DataLoaders with "
                    "workers, so that its model's forward pays no trap; again from when it iterates one without), on "
                    "(always), off (not from its first DataLoader)")
        ->capture_default_str()
        ->check(CLI::IsMember({"auto", "on", "off"}));
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
void add_disk_reserve_option(CLI::App* app, Parsed& p)
{
    app->add_option("--disk-reserve", p.opts.disk_reserve_pct,
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

constexpr const char* kFooter = R"(Examples:
  sudo lotus-bpf --pid 4242                        attach to a training job; Ctrl-C to stop
  sudo lotus-bpf -o run.json.gz -- python train.py launch and trace
  sudo lotus-bpf record -o run.lbt --pid 4242      keep the raw events; then:
  lotus-bpf report run.lbt                         the summary (no root needed)
  lotus-bpf export run.lbt -o run.json             the Chrome trace (no root needed)
  lotus-bpf report run.lbt --html run.html         the HTML report with charts (offline, one file)
  sudo lotus-bpf top --pid 4242                    a live table, refreshed every second; q to quit
  lotus-bpf diff before.lbt after.json             two runs side by side (record files or summary JSONs)
  sudo lotus-bpf sweep --param workers=1,2,4 -- python3 train.py --workers {workers}   one run per setting
  lotus-bpf probes /usr/bin/python3                where it would probe this interpreter
  sudo lotus-bpf dump 12345                       every Python stack of a job and its workers, now (like py-spy dump)
  lotus-bpf rules -o torch.json                    the built-in rules, to change and pass to --rules
  sudo lotus-bpf agent --metrics 0.0.0.0:9464      a node's service: every PyTorch job, as it starts

Exit status: 0 all written (launch mode: the command's status); 1 cannot trace (one line on stderr);
2 usage error; 74 an output could not be written (the others were). man lotus-bpf for more.)";

// A command that traces (the one-step path, record, top): its options, and the --pid option among them.
struct TraceCommand {
    CLI::App* app = nullptr;
    CLI::Option* pid = nullptr;
    Parsed p;
};

// The one-step path: trace, write the Chrome trace, print the summary.
void add_one_step(CLI::App& app, TraceCommand& c)
{
    c.app = &app;
    auto& opts = c.p.opts;
    c.pid = add_capture_options(&app, c.p);
    app.add_option("-o,--output", opts.output, "Chrome trace JSON to write (.json.gz: gzip)")
        ->capture_default_str()
        ->check(kNonEmpty);
    app.add_option("--summary-json", opts.summary_json, "also write the summary as JSON to this file")->check(kNonEmpty);
    app.add_option("--html", opts.html, "also write the HTML report (one offline file with charts) to this file")
        ->check(kNonEmpty);
    app.add_option("--speedscope", opts.speedscope,
                   "also write a speedscope file: per role, ops, loader, collate, native functions and waits as "
                   "frames (its Left Heavy view: each op's total over all samples)")
        ->check(kNonEmpty);
    app.add_option("--resources-csv", opts.resources_csv, "also write the resource readings (one row per process and "
                                                          "interval) as CSV to this file")
        ->check(kNonEmpty);
    app.add_option("--op-csv", opts.op_csv, "also write the summary's per-op figures (count, total, mean, p50, p95) "
                                            "as CSV to this file")
        ->check(kNonEmpty);
    app.add_option("--record", opts.record, "also write the raw event stream to this record file")->check(kNonEmpty);
    app.add_option("--replay", opts.replay, "reconstruct from a record file (no tracing, no root needed)")
        ->check(kNonEmpty);
    add_trace_file_options(&app, c.p);
    add_disk_reserve_option(&app, c.p);
}

void add_record(CLI::App& app, TraceCommand& c)
{
    c.app = app.add_subcommand("record", "trace and write only the raw event stream (a record file)");
    c.pid = add_capture_options(c.app, c.p);
    c.p.opts.record = "lotus.lbt";
    c.app->add_option("-o,--output", c.p.opts.record, "record file to write")->capture_default_str()->check(kNonEmpty);
    add_disk_reserve_option(c.app, c.p);
}

void add_top(CLI::App& app, TraceCommand& c)
{
    c.app = app.add_subcommand("top", "a live table of the pipeline, refreshed every second (like py-spy top); "
                                      "q or Ctrl-C to quit");
    c.pid = add_capture_options(c.app, c.p);
}

// A command that reconstructs a record file (export, report).
struct ReplayCommand {
    CLI::App* app = nullptr;
    Parsed p;
    std::vector<std::string> files; // several nodes' record files: one reconstruction
};

// report/export: the first file is the replay's, the others join it (several nodes).
void take_files(ReplayCommand& c)
{
    c.p.opts.replay = c.files.front();
    c.p.opts.replay_more.assign(c.files.begin() + 1, c.files.end());
}

void add_export(CLI::App& app, ReplayCommand& c)
{
    auto* exp = c.app = app.add_subcommand("export", "reconstruct a record file into a Chrome trace (no root needed)");
    auto& o = c.p.opts;
    exp->add_option("files", c.files, "record file(s): several nodes' files give one reconstruction")
        ->required()
        ->check(kNonEmpty);
    exp->add_option("-o,--output", o.output, "Chrome trace JSON to write (.json.gz: gzip)")
        ->capture_default_str()
        ->check(kNonEmpty);
    exp->add_option("--summary-json", o.summary_json, "also write the summary as JSON to this file")->check(kNonEmpty);
    exp->add_option("--html", o.html, "also write the HTML report to this file")->check(kNonEmpty);
    exp->add_option("--speedscope", o.speedscope, "also write a speedscope file (a flame graph per role) to this file")
        ->check(kNonEmpty);
    exp->add_option("--resources-csv", o.resources_csv, "also write the resource readings as CSV to this file")
        ->check(kNonEmpty);
    exp->add_option("--op-csv", o.op_csv, "also write the summary's per-op figures as CSV to this file")->check(kNonEmpty);
    add_rule_options(exp, c.p);
    add_trace_file_options(exp, c.p);
    add_disk_reserve_option(exp, c.p);
}

void add_report(CLI::App& app, ReplayCommand& c)
{
    auto* rep = c.app = app.add_subcommand("report", "print the summary of a record file (no root needed)");
    auto& o = c.p.opts;
    rep->add_option("files", c.files, "record file(s): several nodes' files give one report")
        ->required()
        ->check(kNonEmpty);
    rep->add_option("--summary-json", o.summary_json, "also write the summary as JSON to this file")->check(kNonEmpty);
    rep->add_option("--html", o.html, "also write the HTML report (one offline file with charts) to this file")
        ->check(kNonEmpty);
    rep->add_option("--resources-csv", o.resources_csv, "also write the resource readings as CSV to this file")
        ->check(kNonEmpty);
    rep->add_option("--op-csv", o.op_csv, "also write the summary's per-op figures as CSV to this file")->check(kNonEmpty);
    add_rule_options(rep, c.p);
    add_disk_reserve_option(rep, c.p);
}

// sweep: its options as given, made into SweepOptions once parsed.
struct SweepCommand {
    CLI::App* app = nullptr;
    lotus::cli::SweepOptions sw;
    std::vector<std::string> params; // NAME=V1,V2
    std::string cpus, memory, duration, interval, reserve, trainer_calls;
    std::vector<std::string> pipelines, spans, rules;
    bool net = false;
};

void add_sweep(CLI::App& app, SweepCommand& c)
{
    auto* sweep = c.app = app.add_subcommand("sweep", "launch and trace a command once per configuration (the job's own "
                                                      "settings crossed with limits), then one table: lotus-bpf sweep "
                                                      "--param workers=1,2,4 [--cpus 1,2] -- CMD --workers {workers}");
    sweep->add_option("--param", c.params, "NAME=V1,V2,...: a setting of the job to vary; {NAME} in the command is "
                                           "replaced by each value (repeatable: every combination)")
        ->check(kNonEmpty);
    sweep->add_option("--repeats", c.sw.repeats, "runs per configuration, interleaved; the table gives their median "
                                                 "and spread")
        ->capture_default_str()
        ->check(CLI::Range(1, 100));
    sweep->add_option("--html", c.sw.html, "also write the table as an HTML page (samples/s per configuration as bars)")
        ->check(kNonEmpty);
    sweep->add_option("--cpus", c.cpus, "comma list of CPU limits (each a run)")->check(kNonEmpty);
    sweep->add_option("--memory", c.memory, "comma list of memory limits (each a run; with --cpus: every pair)")
        ->check(kNonEmpty);
    sweep->add_option("--output-dir", c.sw.dir, "where each run's summary (.txt), trace (.json), summary JSON and HTML "
                                                "report go: a directory the sweep makes, or one an earlier sweep made")
        ->capture_default_str()
        ->check(kNonEmpty);
    sweep->add_option("--summary-json", c.sw.summary_json, "also write the table as JSON to this file")->check(kNonEmpty);
    sweep->add_option("-d,--duration", c.duration, "stop each run after this many seconds")->check(kSeconds);
    sweep->add_option("--resources-interval", c.interval, "as for a single run")->check(CLI::Range(0, 60000));
    sweep->add_flag("--net", c.net, "as for a single run");
    sweep->add_option("--pipeline", c.pipelines, "as for a single run (repeatable)")->check(kNonEmpty);
    sweep->add_option("--span", c.spans, "as for a single run (repeatable)")->check(kNonEmpty);
    sweep->add_option("--rules", c.rules, "as for a single run")->check(kNonEmpty);
    sweep->add_option("--trainer-calls", c.trainer_calls, "as for a single run")
        ->check(CLI::IsMember({"auto", "on", "off"}));
    sweep->add_option("--disk-reserve", c.reserve, "as for a single run: each run's outputs and the sweep's table keep "
                                                   "this much of their file system free (percent; default 5)")
        ->check(CLI::Range(0.0, 99.0));
    sweep->add_option("command", c.sw.command, "the command to run (after --)")->required();
    sweep->positionals_at_end();
}

std::vector<std::string> split_commas(const std::string& list)
{
    std::vector<std::string> out;
    std::stringstream in(list);
    for (std::string v; std::getline(in, v, ',');)
        out.push_back(v);
    return out;
}

int run_sweep_command(SweepCommand& c)
{
    auto& sw = c.sw;
    sw.cpus = split_commas(c.cpus);
    sw.memory = split_commas(c.memory);
    for (const auto& p : c.params) {
        auto eq = p.find('=');
        std::string name = eq == std::string::npos ? "" : p.substr(0, eq);
        auto values = eq == std::string::npos ? std::vector<std::string>{} : split_commas(p.substr(eq + 1));
        if (name.empty() || values.empty() || std::find(values.begin(), values.end(), "") != values.end() ||
            name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != std::string::npos)
            throw CLI::ValidationError(fmt::format("sweep: --param wants NAME=V1,V2 (NAME of letters, digits, _ and -), "
                                                   "not '{}'", p));
        for (const auto& [seen, v] : sw.params)
            if (seen == name)
                throw CLI::ValidationError(fmt::format("sweep: --param {} given twice", name));
        sw.params.emplace_back(name, values);
    }
    if (sw.cpus.empty() && sw.memory.empty() && sw.params.empty())
        throw CLI::ValidationError("sweep: give --param NAME=LIST, --cpus LIST and/or --memory LIST");
    for (const auto& cpus : sw.cpus) {
        char* end = nullptr;
        double v = strtod(cpus.c_str(), &end);
        if (cpus.empty() || *end || !(v >= 0.01 && v <= 4096))
            throw CLI::ValidationError(fmt::format("sweep: --cpus wants numbers of CPUs, not '{}'", cpus));
    }
    for (const auto& m : sw.memory)
        try {
            lotus::launch::parse_bytes(m);
        } catch (const std::exception& e) {
            throw CLI::ValidationError(fmt::format("sweep: --memory: {}", e.what()));
        }
    // What each run gets of the sweep's options.
    auto pass = [&](const char* flag, const std::string& v) {
        if (!v.empty())
            sw.pass.insert(sw.pass.end(), {flag, v});
    };
    pass("-d", c.duration);
    pass("--resources-interval", c.interval);
    if (c.net)
        sw.pass.push_back("--net");
    for (const auto& v : c.pipelines)
        pass("--pipeline", v);
    for (const auto& v : c.spans)
        pass("--span", v);
    for (const auto& v : c.rules)
        pass("--rules", v);
    pass("--disk-reserve", c.reserve);
    pass("--trainer-calls", c.trainer_calls);
    if (!c.reserve.empty()) // the sweep's own table too
        lotus::exporter::set_disk_reserve(std::stod(c.reserve));
    return lotus::cli::run_sweep(sw);
}

struct DiffCommand {
    CLI::App* app = nullptr;
    std::string a, b, html;
};

void add_diff(CLI::App& app, DiffCommand& c)
{
    auto* diff = c.app = app.add_subcommand("diff", "compare two runs, each a summary JSON (--summary-json) or a "
                                                    "record file (no root needed)");
    diff->add_option("A", c.a, "the first run")->required()->check(kNonEmpty);
    diff->add_option("B", c.b, "the second run")->required()->check(kNonEmpty);
    diff->add_option("--html", c.html, "also write the comparison as an HTML page (offline, one file)")->check(kNonEmpty);
}

struct ProbesCommand {
    CLI::App* app = nullptr;
    CLI::Option* pid_opt = nullptr;
    std::string python;
    int pid = 0;
};

void add_probes(CLI::App& app, ProbesCommand& c)
{
    c.app = app.add_subcommand("probes", "what this kernel offers lotus-bpf and the plan chosen from it; with an "
                                         "interpreter, where lotus-bpf probes it: its file, version, and the file "
                                         "offsets of the type-slot functions and the evaluator (no root needed)");
    c.pid_opt = c.app->add_option("-p,--pid", c.pid, "a running Python process")->check(CLI::PositiveNumber);
    c.app->add_option("python", c.python, "a Python executable")->check(kNonEmpty);
}

int run_probes_command(const ProbesCommand& c)
{
    if (c.pid_opt->count() && !c.python.empty())
        throw CLI::ValidationError("probes: give --pid PID or a Python executable, not both");
    return lotus::cli::run_probes(c.pid_opt->count() ? std::optional<int>(c.pid) : std::nullopt, c.python);
}

struct DumpCommand {
    CLI::App* app = nullptr;
    int pid = 0;
    bool no_native = false;
};

void add_dump(CLI::App& app, DumpCommand& c)
{
    c.app = app.add_subcommand("dump", "print every thread's Python stack (innermost first) of a process and its "
                                       "descendants (its DataLoader workers), and the native stack of each blocked in "
                                       "a system call, read from outside: no probe, no stop (like py-spy dump)");
    c.app->add_option("PID", c.pid, "the process (the training job's main process)")
        ->required()
        ->check(CLI::PositiveNumber);
    c.app->add_flag("--no-native", c.no_native, "Python stacks only");
}

struct AgentCommand {
    CLI::App* app = nullptr;
    lotus::cli::AgentOptions a;
    std::vector<std::string> users, cgroups; // (--users and --cgroup: resolved once parsed, in main)
    Parsed p; // each job's run
};

void add_agent(CLI::App& app, AgentCommand& c)
{
    c.app = app.add_subcommand("agent", "a node's tracer as a service: keep --metrics up, attach to each PyTorch "
                                        "training process as it starts (with its children), detach when it ends; "
                                        "SIGTERM detaches everything (docs/agent.md)");
    c.app->add_option("--metrics", c.a.metrics, "serve Prometheus metrics at HOST:PORT")
        ->capture_default_str()
        ->check(kBindAddress);
    c.app->add_option("--match", c.a.match, "only processes whose command line matches this glob (repeatable; "
                                            "default: every CPython process that loaded torch)")
        ->check(kNonEmpty);
    auto* record_dir = c.app->add_option("--record-dir", c.a.record_dir, "also keep one record file per job in this "
                                                                       "directory")
        ->check(kNonEmpty);
    c.app->add_option("--record-max-mb", c.a.record_max_mb, "keep the agent's record files in --record-dir within "
                                                            "this many MiB, deleting its oldest first")
        ->check(kMebibytes)
        ->needs(record_dir);
    c.app->add_option("--users", c.users, "only the jobs of these users (names or uids, comma-separated; "
                                          "repeatable; default: every user's)")
        ->delimiter(',');
    c.app->add_option("--cgroup", c.cgroups, "only the jobs at or under this cgroup path, as /proc/PID/cgroup shows "
                                             "it, v1 or v2 (repeatable)");
    c.app->add_option("--max-jobs", c.a.max_jobs, "trace at most this many jobs at once; the rest are skipped "
                                                  "(said and counted)")
        ->capture_default_str()
        ->check(CLI::Range(1, 4096));
    c.app->add_option("--node", c.p.opts.node, "this machine's name in the metrics and the record files (default: "
                                               "its hostname)")
        ->check(kNonEmpty);
    c.app->add_option("--scan-interval", c.a.scan_interval_s, "look through /proc for new jobs this often (seconds)")
        ->capture_default_str()
        ->check(CLI::Range(0.05, 60.0));
    c.app->add_option("--keep-finished", c.a.keep_finished_s, "keep a finished job's series this long (seconds), for "
                                                              "the last scrapes")
        ->capture_default_str()
        ->check(CLI::Range(0.0, 86400.0));
    c.app->add_option("--resources-interval", c.p.opts.resources_interval_ms, "as for a single run")
        ->capture_default_str()
        ->check(CLI::Range(0, 60000));
    add_rule_options(c.app, c.p);
    add_disk_reserve_option(c.app, c.p);
}

struct RulesCommand {
    CLI::App* app = nullptr;
    std::string output;
};

void add_rules(CLI::App& app, RulesCommand& c)
{
    c.app = app.add_subcommand("rules", "write the built-in rules (what lotus-bpf knows of torch and torchvision) "
                                        "as a --rules file, to change and pass back with --rules FILE");
    c.app->add_option("-o,--output", c.output, "write here (default: stdout)")->check(kNonEmpty);
}

// record and top: a target (--pid or a command, not both), and the outputs that command makes.
lotus::cli::Options& traced_by(TraceCommand& c, const char* name)
{
    auto& o = c.p.opts;
    o.output.clear();
    o.print_summary = false;
    if (c.pid->count())
        o.pid = c.p.pid;
    if (c.pid->count() && !o.command.empty())
        throw CLI::ValidationError("give either --pid or a command, not both");
    if (!c.pid->count() && o.command.empty())
        throw CLI::ValidationError(fmt::format("{}: give --pid PID or -- COMMAND", name));
    check_limits(c.p, c.pid->count());
    return o;
}

// The one-step path's checks.
lotus::cli::Options& one_step(TraceCommand& c)
{
    auto& opts = c.p.opts;
    if (c.pid->count() && !opts.command.empty())
        throw CLI::ValidationError("give either --pid or a command, not both");
    if (!opts.replay.empty() && (c.pid->count() || !opts.command.empty() || !opts.record.empty()))
        throw CLI::ValidationError("--replay reads a record file: no --pid, command or --record with it");
    if (!c.pid->count() && opts.command.empty() && opts.replay.empty())
        throw CLI::ValidationError("give --pid PID or -- COMMAND (or --replay FILE, or a subcommand: "
                                   "record, export, report, top, diff, sweep, probes, rules, dump)");
    if (c.pid->count())
        opts.pid = c.p.pid;
    check_limits(c.p, c.pid->count() || !opts.replay.empty());
    parse_window(c.p);
    return opts;
}

} // namespace

int main(int argc, char** argv)
{
    if (argc >= 2 && strcmp(argv[1], "__guardian") == 0) // started by lotus-bpf itself (capture/guardian.h)
        return lotus::capture::guardian_main(argc - 1, argv + 1);
    CLI::App app{"lotus-bpf: per-op spans of a PyTorch DataLoader pipeline, traced with eBPF, zero code change"};
    app.set_version_flag("-V,--version", "lotus-bpf " LOTUS_VERSION);
    app.footer(kFooter);
    TraceCommand main_cmd, record, top;
    ReplayCommand exp, rep;
    SweepCommand sweep;
    DiffCommand diff;
    ProbesCommand probes;
    RulesCommand rules;
    AgentCommand agent;
    DumpCommand dump;
    add_one_step(app, main_cmd);
    add_record(app, record);
    add_top(app, top);
    add_export(app, exp);
    add_report(app, rep);
    add_sweep(app, sweep);
    add_diff(app, diff);
    add_probes(app, probes);
    add_rules(app, rules);
    add_agent(app, agent);
    add_dump(app, dump);
    app.require_subcommand(0, 1);

    lotus::cli::Options* session = nullptr;
    try {
        app.parse(argc, argv);
        if (diff.app->parsed())
            return lotus::cli::run_diff(diff.a, diff.b, diff.html);
        if (probes.app->parsed())
            return run_probes_command(probes);
        if (dump.app->parsed())
            return lotus::cli::run_dump(dump.pid, !dump.no_native);
        if (rules.app->parsed())
            return lotus::cli::write_builtin_rules(rules.output);
        if (agent.app->parsed()) {
            agent.a.session = agent.p.opts;
            try {
                agent.a.users = lotus::cli::parse_users(agent.users);
            } catch (const std::invalid_argument& e) {
                throw CLI::ValidationError("--users", e.what());
            }
            try {
                for (const auto& c : agent.cgroups)
                    agent.a.cgroups.push_back(lotus::cli::cgroup_prefix(c));
            } catch (const std::invalid_argument& e) {
                throw CLI::ValidationError("--cgroup", e.what());
            }
            return lotus::cli::run_agent(agent.a);
        }
        if (sweep.app->parsed())
            return run_sweep_command(sweep);
        if (record.app->parsed()) {
            session = &traced_by(record, "record");
        } else if (top.app->parsed()) {
            session = &traced_by(top, "top");
            session->top = true;
        } else if (exp.app->parsed()) {
            take_files(exp);
            session = &exp.p.opts;
            session->print_summary = false;
            parse_window(exp.p);
        } else if (rep.app->parsed()) {
            take_files(rep);
            session = &rep.p.opts;
            session->output.clear();
        } else {
            session = &one_step(main_cmd);
        }
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        fmt::print(stderr, "lotus-bpf: {}\n", e.what());
        return 2;
    }
    return lotus::cli::run_session(*session);
}
