// `lotus-bpf sweep --cpus 1,2,4 [--memory 2G,4G] -- CMD`: the command launched and traced once per configuration
// (each run a lotus-bpf of its own, with its own outputs in the output directory), then one table of them all.
#pragma once
#include <string>
#include <vector>

namespace lotus::cli {

struct SweepOptions {
    std::vector<std::string> cpus, memory; // as given: each value a configuration (empty: not varied)
    std::vector<std::string> pass;         // options every run gets (rules, duration, resources interval)
    std::vector<std::string> command;
    std::string dir = "lotus-sweep";
    std::string summary_json; // the table as JSON
};

// Returns 0 when every run went through (whatever its job's exit status), else the first failing run's status.
int run_sweep(const SweepOptions& opts);

} // namespace lotus::cli
