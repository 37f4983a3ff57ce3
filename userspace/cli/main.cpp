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
#include "command_line.h"
#include "option_groups.h"

namespace {

using namespace lotus::cli::cmdline;

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
        sw.disk_reserve_pct = std::stod(c.reserve);
    return lotus::cli::run_sweep(sw);
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
            return lotus::cli::run_probes(probed_pid(probes), probes.python);
        if (dump.app->parsed())
            return lotus::cli::run_dump(dump.pid, !dump.no_native);
        if (rules.app->parsed())
            return lotus::cli::write_builtin_rules(rules.output);
        if (agent.app->parsed())
            return lotus::cli::run_agent(agent_options(agent));
        if (sweep.app->parsed())
            return run_sweep_command(sweep);
        if (record.app->parsed()) {
            session = &traced_by(record, "record");
        } else if (top.app->parsed()) {
            session = &traced_by(top, "top");
            session->top = true;
        } else if (exp.app->parsed()) {
            session = &exported(exp);
        } else if (rep.app->parsed()) {
            session = &reported(rep);
        } else {
            session = &one_step(main_cmd);
        }
    } catch (const CLI::ParseError& e) {
        return parse_error_exit(app, e);
    }
    return lotus::cli::run_session(*session);
}
