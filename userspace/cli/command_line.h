// Every command's command line: those that trace (the one-step path, record, top) and those that reconstruct a
// record file (export, report), filling the run's Options; agent, sweep, diff, probes, dump and rules, each filling
// its own; their checks; and the usage-error path every command shares. main.cpp builds its app from these and
// dispatches; the unit tests parse real command lines through them.
#pragma once
#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <vector>

#include "agent.h"
#include "option_groups.h"
#include "options.h"
#include "sweep.h"

namespace lotus::cli::cmdline {

// A command that traces (the one-step path, record, top): its options, and the --pid option among them.
struct TraceCommand {
    CLI::App* app = nullptr;
    CLI::Option* pid = nullptr;
    Parsed p;
};

// The one-step path: trace, write the Chrome trace, print the summary. Its options go on app itself.
void add_one_step(CLI::App& app, TraceCommand& c);
// The record and top subcommands of app.
void add_record(CLI::App& app, TraceCommand& c);
void add_top(CLI::App& app, TraceCommand& c);

// A command that reconstructs a record file (export, report): its options, and its files.
struct ReplayCommand {
    CLI::App* app = nullptr;
    Parsed p;
    std::vector<std::string> files; // several nodes' record files: one reconstruction
};

// The export and report subcommands of app.
void add_export(CLI::App& app, ReplayCommand& c);
void add_report(CLI::App& app, ReplayCommand& c);
// Once parsed, their Options: the first file is the replay's, the others join it (several nodes); export writes no
// printed summary, report no trace file.
Options& exported(ReplayCommand& c);
Options& reported(ReplayCommand& c);

// Once parsed, the checks (a CLI::ValidationError when they fail) and the run's Options.
// record and top: a target (--pid or a command, not both), and the outputs that command makes.
Options& traced_by(TraceCommand& c, const char* name);
// The one-step path's checks.
Options& one_step(TraceCommand& c);

// rules: write the built-in rules to output (empty: stdout).
struct RulesCommand {
    CLI::App* app = nullptr;
    std::string output;
};
void add_rules(CLI::App& app, RulesCommand& c);

// diff: two runs (summary JSONs or record files) and the optional HTML page.
struct DiffCommand {
    CLI::App* app = nullptr;
    std::string a, b, html;
};
void add_diff(CLI::App& app, DiffCommand& c);

// dump: the process whose stacks to print, and whether native stacks too.
struct DumpCommand {
    CLI::App* app = nullptr;
    int pid = 0;
    bool no_native = false;
};
void add_dump(CLI::App& app, DumpCommand& c);

// probes: the kernel's offer and plan; with --pid or a Python executable (not both), where lotus-bpf probes it.
struct ProbesCommand {
    CLI::App* app = nullptr;
    CLI::Option* pid_opt = nullptr;
    std::string python;
    int pid = 0;
};
void add_probes(CLI::App& app, ProbesCommand& c);
// Once parsed: its --pid, if given (a CLI::ValidationError with a Python executable too).
std::optional<int> probed_pid(const ProbesCommand& c);

// agent: the node's service, its options, and each job's run.
struct AgentCommand {
    CLI::App* app = nullptr;
    AgentOptions a;
    std::vector<std::string> users, cgroups; // --users and --cgroup as given: resolved by agent_options
    Parsed p; // each job's run
};

void add_agent(CLI::App& app, AgentCommand& c);
// Once parsed: its options, each job's run and --users and --cgroup resolved (a CLI::ValidationError when not).
AgentOptions& agent_options(AgentCommand& c);

// sweep: its options as given, made into SweepOptions once parsed. The options it passes on to each run are the
// single run's own declarations (forwarded), checked as a run checks them and passed on as given.
struct SweepCommand {
    CLI::App* app = nullptr;
    SweepOptions sw;
    std::vector<std::string> params; // NAME=V1,V2
    std::string cpus, memory;
    Parsed run;                         // what the forwarded options parse into (the reserve is the table's too)
    std::vector<CLI::Option*> forwarded; // in the order each run gets them
};

void add_sweep(CLI::App& app, SweepCommand& c);
// Once parsed: its SweepOptions, the lists split and checked (a CLI::ValidationError when not), and what each run
// gets of the sweep's options.
SweepOptions& sweep_options(SweepCommand& c);

// A parse error's exit: help and version print and give 0; a usage error one line on stderr, status 2.
int parse_error_exit(CLI::App& app, const CLI::ParseError& e);

} // namespace lotus::cli::cmdline
