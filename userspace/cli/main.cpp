// lotus-bpf: trace the data-preprocessing pipeline of a running PyTorch job from outside the process.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "session.h"

int main(int argc, char** argv)
{
    CLI::App app{"lotus-bpf: per-op spans of a PyTorch DataLoader pipeline, traced with eBPF, zero code change"};
    app.set_version_flag("--version", "lotus-bpf " LOTUS_VERSION);
    lotus::cli::Options opts;
    int pid = 0;
    auto* pid_opt = app.add_option("-p,--pid", pid, "attach to this running Python process and its children");
    app.add_option("-o,--output", opts.output, "Chrome trace JSON to write (.json.gz: gzip)")
        ->capture_default_str();
    app.add_option("-d,--duration", opts.duration_s, "stop after this many seconds (default: until Ctrl-C, "
                                                     "SIGTERM or the target exits)")
        ->check(CLI::NonNegativeNumber);
    app.add_option("--pipeline", opts.pipeline_classes,
                   "class name glob whose __call__ plays Compose's role (repeatable; Compose is built in)");
    app.add_option("--span", opts.spans,
                   "trace every call of these Python functions as spans: QUALNAME_GLOB or FILE_GLOB:QUALNAME_GLOB "
                   "(repeatable)");
    app.add_option("--rules", opts.rules_file, "pipelines and spans from a JSON file (schemas/rules.schema.json)");
    app.add_flag("--all-calls", opts.all_calls,
                 "see every Python call, also those made from Python (launch mode; CPython 3.10, or 3.12+ through "
                 "PYTHONPERFSUPPORT=1); costs a trap per call");
    app.add_option("--summary-json", opts.summary_json, "also write the summary as JSON to this file");
    app.add_option("--record", opts.record, "also write the raw event stream to this record file");
    app.add_option("--replay", opts.replay, "reconstruct from a record file (no tracing, no root needed)");
    app.add_flag("--coarse", opts.coarse, "trace file: only batches, waits and their arrows (the summary keeps all)");
    std::string window;
    app.add_option("--window", window, "trace file: only spans starting in START:END seconds after tracing began "
                                       "(END may be empty)");
    app.add_flag("--native-map", opts.native_map,
                 "sample every traced thread (perf event) and map each op's time to native functions; probe the "
                 "built-in native set (JPEG decode, Pillow, torch ops) as spans");
    app.add_option("--native", opts.native,
                   "also probe these native functions as spans: 'LIBGLOB:SYMBOLGLOB' (repeatable; implies "
                   "--native-map)");
    app.add_option("--sample-freq", opts.sample_freq, "native map sampling frequency in Hz (0: no sampling)")
        ->capture_default_str()
        ->check(CLI::Range(0, 100000));
    app.add_option("--counters", opts.counters,
                   "perf-event counters per op: 'default' (cycles,instructions,cache-misses,branch-misses) or a "
                   "comma list; software events (task-clock,page-faults,context-switches) where no PMU counts them");
    app.add_flag("-q,--quiet", opts.quiet, "no live status line");
    app.add_option("command", opts.command, "launch mode: the command to run and trace (after --)");
    app.positionals_at_end();
    try {
        app.parse(argc, argv);
        if (pid_opt->count() && !opts.command.empty())
            throw CLI::ValidationError("give either --pid or a command, not both");
        if (!opts.replay.empty() && (pid_opt->count() || !opts.command.empty() || !opts.record.empty()))
            throw CLI::ValidationError("--replay reads a record file: no --pid, command or --record with it");
        if (!pid_opt->count() && opts.command.empty() && opts.replay.empty())
            throw CLI::ValidationError("give --pid PID or -- COMMAND (or --replay FILE)");
        if (!window.empty()) {
            auto colon = window.find(':');
            char* end = nullptr;
            std::string a = window.substr(0, colon), b = colon == std::string::npos ? "" : window.substr(colon + 1);
            opts.window_start_s = a.empty() ? 0 : strtod(a.c_str(), &end);
            bool bad = colon == std::string::npos || (!a.empty() && *end);
            if (!b.empty()) {
                opts.window_end_s = strtod(b.c_str(), &end);
                bad |= *end || opts.window_end_s <= opts.window_start_s;
            }
            if (bad || opts.window_start_s < 0)
                throw CLI::ValidationError("--window wants START:END in seconds, e.g. 10:20 or 5:");
        }
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        fmt::print(stderr, "lotus-bpf: {}\n", e.what());
        return 2;
    }
    if (pid_opt->count())
        opts.pid = pid;
    return lotus::cli::run_session(opts);
}
