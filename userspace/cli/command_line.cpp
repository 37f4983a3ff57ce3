// The tracing commands' command line (command_line.h).
#include "command_line.h"

#include <fmt/format.h>

#include <cstdio>

namespace lotus::cli::cmdline {

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
    add_file_sink_options(&app, opts);
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

Options& traced_by(TraceCommand& c, const char* name)
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

Options& one_step(TraceCommand& c)
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

int parse_error_exit(CLI::App& app, const CLI::ParseError& e)
{
    if (dynamic_cast<const CLI::CallForHelp*>(&e) || dynamic_cast<const CLI::CallForVersion*>(&e))
        return app.exit(e);
    fmt::print(stderr, "lotus-bpf: {}\n", e.what());
    return 2;
}

} // namespace lotus::cli::cmdline
