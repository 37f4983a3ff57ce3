// lotus-bpf: trace the data-preprocessing pipeline of a running PyTorch job from outside the process.
// One step: lotus-bpf --pid PID (or -- CMD) traces, writes the Chrome trace and prints the summary.
// Like perf: `record` keeps the raw event stream, `export` and `report` reconstruct it offline.
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstring>
#include <tuple>
#include <vector>

#include "capture/guardian.h"
#include "capture/perf_events.h"
#include "lotus_abi.h"
#include "agent.h"
#include "diff.h"
#include "dump.h"
#include "common/output_file.h"
#include "probes.h"
#include "rules_file.h"
#include "sweep.h"
#include "session.h"
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
            return lotus::cli::run_sweep(sweep_options(sweep));
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
