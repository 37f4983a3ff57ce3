// Every command's command line (cli/command_line.h): real command lines parsed into the run's Options (or the
// command's own options), and the usage-error path (one line on stderr, status 2) for the ones lotus-bpf refuses.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cli/command_line.h"

using namespace lotus::cli;
using namespace lotus::cli::cmdline;

namespace {

// main's app, as far as the tracing commands go: the one-step path on the app, record and top as subcommands.
struct Line {
    CLI::App app{"test"};
    TraceCommand main_cmd, record, top;
    ReplayCommand exp, rep;
    std::string err; // stderr of a refused line
    int status = -1; // parse_error_exit's status; -1: parsed

    // Parses "lotus-bpf ARGS..." and runs the checks of the command it names; its Options, or none when refused.
    std::optional<Options> parse(std::vector<std::string> args)
    {
        add_one_step(app, main_cmd);
        add_record(app, record);
        add_top(app, top);
        add_export(app, exp);
        add_report(app, rep);
        app.require_subcommand(0, 1);
        args.insert(args.begin(), "lotus-bpf");
        std::vector<char*> argv;
        for (auto& a : args)
            argv.push_back(a.data());
        testing::internal::CaptureStderr();
        std::optional<Options> out;
        try {
            app.parse(static_cast<int>(argv.size()), argv.data());
            if (record.app->parsed())
                out = traced_by(record, "record");
            else if (top.app->parsed())
                out = traced_by(top, "top");
            else if (exp.app->parsed())
                out = exported(exp);
            else if (rep.app->parsed())
                out = reported(rep);
            else
                out = one_step(main_cmd);
        } catch (const CLI::ParseError& e) {
            status = parse_error_exit(app, e);
        }
        err = testing::internal::GetCapturedStderr();
        return out;
    }
};

// One of main's other subcommands, added to an app by its library function: parses "lotus-bpf ARGS...", then runs
// `then` (that command's checks, once parsed); false, with the status and stderr, when the line is refused.
struct Sub {
    CLI::App app{"test"};
    std::string err;
    int status = -1; // -1: parsed

    template <class Then>
    bool parse(std::vector<std::string> args, Then then)
    {
        app.require_subcommand(0, 1);
        args.insert(args.begin(), "lotus-bpf");
        std::vector<char*> argv;
        for (auto& a : args)
            argv.push_back(a.data());
        testing::internal::CaptureStderr();
        try {
            app.parse(static_cast<int>(argv.size()), argv.data());
            then();
        } catch (const CLI::ParseError& e) {
            status = parse_error_exit(app, e);
        }
        err = testing::internal::GetCapturedStderr();
        return status == -1;
    }

    // A refused line: status 2, one line on stderr naming what was wrong.
    void expect_refused(const std::string& says) const
    {
        EXPECT_EQ(status, 2);
        EXPECT_EQ(err.rfind("lotus-bpf: ", 0), 0u) << err;
        EXPECT_NE(err.find(says), std::string::npos) << "wanted '" << says << "' in: " << err;
        EXPECT_EQ(err.find('\n'), err.size() - 1) << err;
    }
};

std::vector<std::string> names(const std::vector<lotus::capture::CounterSpec>& counters)
{
    std::vector<std::string> out;
    for (const auto& c : counters)
        out.push_back(c.name);
    return out;
}

} // namespace

TEST(CommandLine, AttachWithOutputs)
{
    Line l;
    auto o = l.parse({"--pid", "4242", "-o", "run.json.gz", "--html", "run.html", "--summary-json", "s.json"});
    ASSERT_TRUE(o) << l.err;
    EXPECT_EQ(o->pid, 4242);
    EXPECT_TRUE(o->command.empty());
    EXPECT_EQ(o->output, "run.json.gz");
    EXPECT_EQ(o->html, "run.html");
    EXPECT_EQ(o->summary_json, "s.json");
    EXPECT_TRUE(o->print_summary);
    EXPECT_FALSE(o->native_map);
}

// The table's output files (cli/sinks.def): only those given are in file_sinks, by their flag; an empty name is a
// usage error, as for every output.
TEST(CommandLine, TableSinksAreKeptByTheirFlag)
{
    Line l;
    auto o = l.parse({"--pid", "4242", "--op-csv", "ops.csv.gz"});
    ASSERT_TRUE(o) << l.err;
    EXPECT_EQ(o->file_sinks, (std::map<std::string, std::string>{{"--op-csv", "ops.csv.gz"}}));
    Line none;
    o = none.parse({"--pid", "4242"});
    ASSERT_TRUE(o) << none.err;
    EXPECT_TRUE(o->file_sinks.empty());
    Line empty;
    EXPECT_FALSE(empty.parse({"--pid", "4242", "--op-csv", ""}));
    EXPECT_EQ(empty.status, 2);
    EXPECT_NE(empty.err.find("--op-csv"), std::string::npos) << empty.err;
}

TEST(CommandLine, LaunchTakesEverythingAfterTheDashesAsTheCommand)
{
    Line l;
    auto o = l.parse({"--native-map", "--counters", "default", "--", "python3", "x.py", "--workers", "4"});
    ASSERT_TRUE(o) << l.err;
    EXPECT_FALSE(o->pid);
    EXPECT_EQ(o->command, (std::vector<std::string>{"python3", "x.py", "--workers", "4"}));
    EXPECT_TRUE(o->native_map);
    EXPECT_EQ(names(o->counters), (std::vector<std::string>{"cycles", "instructions", "cache-misses", "branch-misses"}));
    EXPECT_EQ(o->output, "lotus-trace.json"); // the default
    EXPECT_EQ(o->trainer_calls, lotus::model::TrainerCalls::Auto);
    EXPECT_EQ(o->sample_unwind, SampleUnwind::Cfi);
}

// --trainer-calls, --sample-unwind and --counters are typed when the line is read (an enum, a counter list).
TEST(CommandLine, ChoicesAreTypedWhenParsed)
{
    Line l;
    auto o = l.parse({"--trainer-calls", "off", "--sample-unwind", "fp", "--counters", "task-clock,page-faults", "--pid",
                      "42"});
    ASSERT_TRUE(o) << l.err;
    EXPECT_EQ(o->trainer_calls, lotus::model::TrainerCalls::Off);
    EXPECT_EQ(o->sample_unwind, SampleUnwind::Fp);
    EXPECT_EQ(names(o->counters), (std::vector<std::string>{"task-clock", "page-faults"}));
    Line on;
    o = on.parse({"--trainer-calls", "on", "--pid", "42"});
    ASSERT_TRUE(o) << on.err;
    EXPECT_EQ(o->trainer_calls, lotus::model::TrainerCalls::On);
    EXPECT_TRUE(o->counters.empty()); // none asked: none counted
    Line bad;
    EXPECT_FALSE(bad.parse({"--sample-unwind", "dwarf", "--pid", "42"}));
    EXPECT_EQ(bad.status, 2);
    EXPECT_NE(bad.err.find("--sample-unwind"), std::string::npos) << bad.err;
}

TEST(CommandLine, LaunchLimitsAndMetrics)
{
    Line l;
    auto o = l.parse({"--cpus", "2.5", "--memory", "512M", "--metrics", ":9464", "-d", "3", "--", "python3", "x.py"});
    ASSERT_TRUE(o) << l.err;
    EXPECT_DOUBLE_EQ(o->limits.cpus, 2.5);
    EXPECT_EQ(o->limits.memory_bytes, 512u << 20);
    EXPECT_EQ(o->metrics, ":9464");
    EXPECT_DOUBLE_EQ(o->duration_s, 3);
}

TEST(CommandLine, WindowIsParsedIntoSeconds)
{
    Line l;
    auto o = l.parse({"--replay", "run.lbt", "--window", "5:12.5"});
    ASSERT_TRUE(o) << l.err;
    EXPECT_EQ(o->replay, "run.lbt");
    EXPECT_DOUBLE_EQ(o->window_start_s, 5);
    EXPECT_DOUBLE_EQ(o->window_end_s, 12.5);
}

TEST(CommandLine, RecordWritesOnlyTheRecordFile)
{
    Line l;
    auto o = l.parse({"record", "--pid", "7", "-o", "r.lbt"});
    ASSERT_TRUE(o) << l.err;
    EXPECT_EQ(o->pid, 7);
    EXPECT_EQ(o->record, "r.lbt");
    EXPECT_TRUE(o->output.empty());
    EXPECT_FALSE(o->print_summary);

    Line d;
    auto od = d.parse({"record", "--", "python3", "x.py"});
    ASSERT_TRUE(od) << d.err;
    EXPECT_EQ(od->record, "lotus.lbt"); // the default
}

// export and report: the first record file is the replay's, the others join it; the table's outputs by flag;
// export writes the trace and no printed summary, report the summary and no trace.
TEST(CommandLine, ExportAndReportReadRecordFiles)
{
    Line e;
    auto o = e.parse({"export", "n0.lbt", "n1.lbt", "-o", "t.json", "--waits-csv", "w.csv", "--window", "5:"});
    ASSERT_TRUE(o) << e.err;
    EXPECT_EQ(o->replay, "n0.lbt");
    EXPECT_EQ(o->replay_more, std::vector<std::string>{"n1.lbt"});
    EXPECT_EQ(o->output, "t.json");
    EXPECT_FALSE(o->print_summary);
    EXPECT_EQ(o->file_sinks, (std::map<std::string, std::string>{{"--waits-csv", "w.csv"}}));
    EXPECT_DOUBLE_EQ(o->window_start_s, 5);

    Line r;
    o = r.parse({"report", "run.lbt", "--op-csv", "ops.csv", "--disk-reserve", "0"});
    ASSERT_TRUE(o) << r.err;
    EXPECT_EQ(o->replay, "run.lbt");
    EXPECT_TRUE(o->replay_more.empty());
    EXPECT_TRUE(o->output.empty());
    EXPECT_TRUE(o->print_summary);
    EXPECT_EQ(o->file_sinks, (std::map<std::string, std::string>{{"--op-csv", "ops.csv"}}));
    EXPECT_EQ(o->disk_reserve_pct, 0);

    Line none;
    EXPECT_FALSE(none.parse({"report"}));
    EXPECT_EQ(none.status, 2);
}

// Each refused line: status 2 and one line on stderr naming what was wrong.
TEST(CommandLine, UsageErrorsGiveStatusTwoAndOneLine)
{
    struct Case {
        std::vector<std::string> args;
        std::string says;
    };
    const std::vector<Case> cases = {
        {{"--no-such-option"}, "--no-such-option"},
        {{"--pid", "abc"}, "wants a process id"},
        {{"--pid", "0"}, "wants a process id"},
        {{"--cpus", "0", "--", "python3", "x.py"}, "--cpus"},
        {{"--counters", "no-such-counter", "--pid", "5"}, "no-such-counter"},
        {{"--metrics", "nohost", "--pid", "5"}, "--metrics"},
        {{"--pid", "5", "--", "python3", "x.py"}, "give either --pid or a command, not both"},
        {{"--pid", "5", "--cpus", "2"}, "need launch mode"},
        {{"--window", "5", "--pid", "5"}, "--window wants START:END"},
        {{"-o", "", "--pid", "5"}, "must not be empty"},
        {{}, "give --pid PID or -- COMMAND"},
        {{"record"}, "record: give --pid PID or -- COMMAND"},
        {{"top", "--pid", "5", "--", "python3"}, "not both"},
    };
    for (const auto& c : cases) {
        Line l;
        EXPECT_FALSE(l.parse(c.args)) << c.says;
        EXPECT_EQ(l.status, 2) << c.says;
        EXPECT_EQ(l.err.rfind("lotus-bpf: ", 0), 0u) << l.err;
        EXPECT_NE(l.err.find(c.says), std::string::npos) << "wanted '" << c.says << "' in: " << l.err;
        EXPECT_EQ(l.err.find('\n'), l.err.size() - 1) << l.err;
    }
}

TEST(CommandLine, HelpIsNotAUsageError)
{
    Line l;
    testing::internal::CaptureStdout();
    EXPECT_FALSE(l.parse({"--help"}));
    auto out = testing::internal::GetCapturedStdout();
    EXPECT_EQ(l.status, 0);
    EXPECT_TRUE(l.err.empty()) << l.err;
    EXPECT_NE(out.find("--native-map"), std::string::npos);
}

TEST(CommandLine, Rules)
{
    Sub s;
    RulesCommand c;
    add_rules(s.app, c);
    ASSERT_TRUE(s.parse({"rules", "-o", "torch.json"}, [] {})) << s.err;
    EXPECT_TRUE(c.app->parsed());
    EXPECT_EQ(c.output, "torch.json");

    Sub bad;
    RulesCommand b;
    add_rules(bad.app, b);
    EXPECT_FALSE(bad.parse({"rules", "-o", ""}, [] {}));
    bad.expect_refused("--output");
}

TEST(CommandLine, Diff)
{
    Sub s;
    DiffCommand c;
    add_diff(s.app, c);
    ASSERT_TRUE(s.parse({"diff", "before.lbt", "after.json", "--html", "d.html"}, [] {})) << s.err;
    EXPECT_TRUE(c.app->parsed());
    EXPECT_EQ(c.a, "before.lbt");
    EXPECT_EQ(c.b, "after.json");
    EXPECT_EQ(c.html, "d.html");

    Sub bad;
    DiffCommand b;
    add_diff(bad.app, b);
    EXPECT_FALSE(bad.parse({"diff", "before.lbt"}, [] {}));
    bad.expect_refused("B is required");
}

TEST(CommandLine, Dump)
{
    Sub s;
    DumpCommand c;
    add_dump(s.app, c);
    ASSERT_TRUE(s.parse({"dump", "12345", "--no-native"}, [] {})) << s.err;
    EXPECT_TRUE(c.app->parsed());
    EXPECT_EQ(c.pid, 12345);
    EXPECT_TRUE(c.no_native);

    Sub bad;
    DumpCommand b;
    add_dump(bad.app, b);
    EXPECT_FALSE(bad.parse({"dump", "0"}, [] {}));
    bad.expect_refused("PID");
}

TEST(CommandLine, Probes)
{
    Sub s;
    ProbesCommand c;
    std::optional<int> pid;
    add_probes(s.app, c);
    ASSERT_TRUE(s.parse({"probes", "--pid", "4242"}, [&] { pid = probed_pid(c); })) << s.err;
    EXPECT_EQ(pid, 4242);
    EXPECT_TRUE(c.python.empty());

    Sub py;
    ProbesCommand p;
    add_probes(py.app, p);
    ASSERT_TRUE(py.parse({"probes", "/usr/bin/python3"}, [&] { pid = probed_pid(p); })) << py.err;
    EXPECT_EQ(pid, std::nullopt);
    EXPECT_EQ(p.python, "/usr/bin/python3");

    Sub bad;
    ProbesCommand b;
    add_probes(bad.app, b);
    EXPECT_FALSE(bad.parse({"probes", "--pid", "12", "/usr/bin/python3"}, [&] { probed_pid(b); }));
    bad.expect_refused("not both");
}

TEST(CommandLine, Agent)
{
    Sub s;
    AgentCommand c;
    AgentOptions* a = nullptr;
    add_agent(s.app, c);
    ASSERT_TRUE(s.parse({"agent", "--metrics", "0.0.0.0:9464", "--match", "*train*", "--users", "root,0", "--cgroup",
                         "/kubepods", "--max-jobs", "3", "--node", "n1", "--resources-interval", "250"},
                        [&] { a = &agent_options(c); }))
        << s.err;
    ASSERT_TRUE(a);
    EXPECT_EQ(a->metrics, "0.0.0.0:9464");
    EXPECT_EQ(a->match, std::vector<std::string>{"*train*"});
    EXPECT_EQ(a->users, (std::vector<uint32_t>{0, 0}));
    EXPECT_EQ(a->cgroups, std::vector<std::string>{cgroup_prefix("/kubepods")});
    EXPECT_EQ(a->max_jobs, 3u);
    EXPECT_EQ(a->session.node, "n1"); // each job's run
    EXPECT_EQ(a->session.resources_interval_ms, 250);

    Sub bad;
    AgentCommand b;
    add_agent(bad.app, b);
    EXPECT_FALSE(bad.parse({"agent", "--cgroup", "relative"}, [&] { agent_options(b); }));
    bad.expect_refused("--cgroup: relative");
}

TEST(CommandLine, Sweep)
{
    Sub s;
    SweepCommand c;
    SweepOptions* sw = nullptr;
    add_sweep(s.app, c);
    ASSERT_TRUE(s.parse({"sweep", "--param", "workers=1,2,4", "--cpus", "1,2", "--repeats", "3", "-d", "20", "--net",
                         "--disk-reserve", "10", "--", "python3", "train.py", "--workers", "{workers}"},
                        [&] { sw = &sweep_options(c); }))
        << s.err;
    ASSERT_TRUE(sw);
    ASSERT_EQ(sw->params.size(), 1u);
    EXPECT_EQ(sw->params[0].first, "workers");
    EXPECT_EQ(sw->params[0].second, (std::vector<std::string>{"1", "2", "4"}));
    EXPECT_EQ(sw->cpus, (std::vector<std::string>{"1", "2"}));
    EXPECT_TRUE(sw->memory.empty());
    EXPECT_EQ(sw->repeats, 3u);
    EXPECT_EQ(sw->command, (std::vector<std::string>{"python3", "train.py", "--workers", "{workers}"}));
    // What each run gets, as its own flags; the reserve is the sweep's table's too.
    EXPECT_EQ(sw->pass, (std::vector<std::string>{"--duration", "20", "--net", "--disk-reserve", "10"}));
    EXPECT_EQ(sw->disk_reserve_pct, 10.0);

    // The forwarded options are a single run's: their values as given, repeatable where a run's are...
    Sub more;
    SweepCommand m;
    add_sweep(more.app, m);
    ASSERT_TRUE(more.parse({"sweep", "--cpus", "1", "--pipeline", "A", "--pipeline", "B*", "--trainer-calls", "off",
                            "--resources-interval", "250", "--", "true"},
                           [&] { sw = &sweep_options(m); }))
        << more.err;
    EXPECT_EQ(sw->pass, (std::vector<std::string>{"--resources-interval", "250", "--pipeline", "A", "--pipeline", "B*",
                                                  "--trainer-calls", "off"}));
    EXPECT_EQ(sw->disk_reserve_pct, lotus::common::kDefaultDiskReserve);
    // ...and checked as a run checks them, before any run: one --rules file (a run takes one), a known choice.
    for (auto [args, says] : std::vector<std::pair<std::vector<std::string>, std::string>>{
             {{"sweep", "--cpus", "1", "--rules", "a.json", "--rules", "b.json", "--", "true"}, "--rules"},
             {{"sweep", "--cpus", "1", "--trainer-calls", "sometimes", "--", "true"}, "--trainer-calls"},
             {{"sweep", "--cpus", "1", "-d", "nan", "--", "true"}, "--duration"},
             {{"sweep", "--cpus", "1", "--net", "--resources-interval", "0", "--", "true"}, "--net"}}) {
        Sub refused;
        SweepCommand r;
        add_sweep(refused.app, r);
        EXPECT_FALSE(refused.parse(args, [&] { sweep_options(r); })) << args[4];
        refused.expect_refused(says);
    }

    Sub bad;
    SweepCommand b;
    add_sweep(bad.app, b);
    EXPECT_FALSE(bad.parse({"sweep", "--param", "w=1", "--param", "w=2", "--", "true"}, [&] { sweep_options(b); }));
    bad.expect_refused("sweep: --param w given twice");
}
