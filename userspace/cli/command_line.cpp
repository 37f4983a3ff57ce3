// Every command's command line (command_line.h).
#include "command_line.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "launch/cgroup.h"

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

namespace {

// "a,b,c" as its items ("" gives none).
std::vector<std::string> split_commas(const std::string& list)
{
    std::vector<std::string> out;
    std::stringstream in(list);
    for (std::string v; std::getline(in, v, ',');)
        out.push_back(v);
    return out;
}

// report/export: the first file is the replay's, the others join it (several nodes).
void take_files(ReplayCommand& c)
{
    c.p.opts.replay = c.files.front();
    c.p.opts.replay_more.assign(c.files.begin() + 1, c.files.end());
}

} // namespace

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
    add_file_sink_options(exp, o);
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
    add_file_sink_options(rep, o);
    add_rule_options(rep, c.p);
    add_disk_reserve_option(rep, c.p);
}

Options& exported(ReplayCommand& c)
{
    take_files(c);
    c.p.opts.print_summary = false;
    parse_window(c.p);
    return c.p.opts;
}

Options& reported(ReplayCommand& c)
{
    take_files(c);
    c.p.opts.output.clear();
    return c.p.opts;
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

void add_rules(CLI::App& app, RulesCommand& c)
{
    c.app = app.add_subcommand("rules", "write the built-in rules (what lotus-bpf knows of torch and torchvision) "
                                        "as a --rules file, to change and pass back with --rules FILE");
    c.app->add_option("-o,--output", c.output, "write here (default: stdout)")->check(kNonEmpty);
}

void add_diff(CLI::App& app, DiffCommand& c)
{
    auto* diff = c.app = app.add_subcommand("diff", "compare two runs, each a summary JSON (--summary-json) or a "
                                                    "record file (no root needed)");
    diff->add_option("A", c.a, "the first run")->required()->check(kNonEmpty);
    diff->add_option("B", c.b, "the second run")->required()->check(kNonEmpty);
    diff->add_option("--html", c.html, "also write the comparison as an HTML page (offline, one file)")->check(kNonEmpty);
}

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

void add_probes(CLI::App& app, ProbesCommand& c)
{
    c.app = app.add_subcommand("probes", "what this kernel offers lotus-bpf and the plan chosen from it; with an "
                                         "interpreter, where lotus-bpf probes it: its file, version, and the file "
                                         "offsets of the type-slot functions and the evaluator (no root needed)");
    c.pid_opt = c.app->add_option("-p,--pid", c.pid, "a running Python process")->check(CLI::PositiveNumber);
    c.app->add_option("python", c.python, "a Python executable")->check(kNonEmpty);
}

std::optional<int> probed_pid(const ProbesCommand& c)
{
    if (c.pid_opt->count() && !c.python.empty())
        throw CLI::ValidationError("probes: give --pid PID or a Python executable, not both");
    return c.pid_opt->count() ? std::optional<int>(c.pid) : std::nullopt;
}

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
    add_resources_interval_option(c.app, c.p);
    add_rule_options(c.app, c.p);
    add_disk_reserve_option(c.app, c.p);
}

AgentOptions& agent_options(AgentCommand& c)
{
    c.a.session = c.p.opts;
    try {
        c.a.users = parse_users(c.users);
    } catch (const std::invalid_argument& e) {
        throw CLI::ValidationError("--users", e.what());
    }
    try {
        for (const auto& g : c.cgroups)
            c.a.cgroups.push_back(cgroup_prefix(g));
    } catch (const std::invalid_argument& e) {
        throw CLI::ValidationError("--cgroup", e.what());
    }
    return c.a;
}

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
    // Each run's options, declared as for a single run.
    c.forwarded = {add_duration_option(sweep, c.run), add_resources_interval_option(sweep, c.run),
                   add_net_flag(sweep, c.run)};
    for (auto* o : add_rule_options(sweep, c.run))
        c.forwarded.push_back(o);
    c.forwarded.push_back(add_disk_reserve_option(sweep, c.run));
    c.forwarded.back()->description(c.forwarded.back()->get_description() + "; the sweep's table's too");
    c.forwarded.push_back(add_trainer_calls_option(sweep, c.run));
    sweep->add_option("command", c.sw.command, "the command to run (after --)")->required();
    sweep->footer("-d, --resources-interval, --net, --pipeline, --span, --rules, --disk-reserve and --trainer-calls "
                  "are a single run's options, checked as a run checks them and passed on to each run as given.");
    sweep->positionals_at_end();
}

SweepOptions& sweep_options(SweepCommand& c)
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
            launch::parse_bytes(m);
        } catch (const std::exception& e) {
            throw CLI::ValidationError(fmt::format("sweep: --memory: {}", e.what()));
        }
    check_limits(c.run, false); // (--net with --resources-interval 0: refused before any run)
    // What each run gets of the sweep's options: each given one, by its long name, with its values as given.
    for (const auto* o : c.forwarded) {
        if (!o->count())
            continue;
        if (o->get_expected_max() == 0) { // a flag
            sw.pass.push_back(o->get_name());
            continue;
        }
        for (const auto& v : o->results())
            sw.pass.insert(sw.pass.end(), {o->get_name(), v});
    }
    sw.disk_reserve_pct = c.run.opts.disk_reserve_pct; // the sweep's own table too
    return sw;
}

int parse_error_exit(CLI::App& app, const CLI::ParseError& e)
{
    if (dynamic_cast<const CLI::CallForHelp*>(&e) || dynamic_cast<const CLI::CallForVersion*>(&e))
        return app.exit(e);
    fmt::print(stderr, "lotus-bpf: {}\n", e.what());
    return 2;
}

} // namespace lotus::cli::cmdline
