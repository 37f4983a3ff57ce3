// The command line's shared parts (main.cpp): the validators, and the option groups that several subcommands take
// (rules, capture, disk reserve, trace file), with their checks.
#pragma once
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "options.h"

namespace lotus::cli::cmdline {

// Empty names and patterns are mistakes (a shell variable that was not set), never "everything" or "nothing".
extern const CLI::Validator kNonEmpty;
// Seconds: nan and inf refused (a duration that never ends).
extern const CLI::Validator kSeconds;
// --record-max-mb: a size in MiB, fractions allowed, above 0.
extern const CLI::Validator kMebibytes;
// --metrics HOST:PORT.
extern const CLI::Validator kBindAddress;

struct Parsed {
    lotus::cli::Options opts;
    int pid = 0;
    std::string window, memory;
    std::vector<std::string> read_bps, write_bps; // DEVICE:RATE
};

// A tracing run's option checks: --net counts at the resource readings; --cpus/--memory/--cpuset: the job
// lotus-bpf launches runs in a cgroup it makes, an attached one's is not its own.
void check_limits(Parsed& p, bool attach);
// What decides which spans exist: the engine's rules (used live and on replay).
std::vector<CLI::Option*> add_rule_options(CLI::App* app, Parsed& p);
// How to capture: target, duration, probes.
CLI::Option* add_capture_options(CLI::App* app, Parsed& p);
// Pieces of it that sweep declares too, to pass on to each of its runs as given (-d, --resources-interval, --net,
// --trainer-calls).
CLI::Option* add_duration_option(CLI::App* app, Parsed& p);
CLI::Option* add_resources_interval_option(CLI::App* app, Parsed& p);
CLI::Option* add_net_flag(CLI::App* app, Parsed& p);
CLI::Option* add_trainer_calls_option(CLI::App* app, Parsed& p);
// Every subcommand that writes files.
CLI::Option* add_disk_reserve_option(CLI::App* app, Parsed& p);
void add_trace_file_options(CLI::App* app, Parsed& p);
// The output files of sinks.def's table (--op-csv...): each its option, filling opts.file_sinks.
void add_file_sink_options(CLI::App* app, Options& opts);
void parse_window(Parsed& p);

} // namespace lotus::cli::cmdline
