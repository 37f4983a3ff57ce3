// `lotus-bpf sweep [--param NAME=V1,V2 ...] [--cpus 1,2,4] [--memory 2G,4G] [--repeats N] -- CMD {NAME}`: the
// command launched and traced once per configuration and repeat (each run a lotus-bpf of its own, with its own
// outputs in the output directory; {NAME} in the command is the configuration's value of --param NAME), then one
// table of them all, the best configuration by samples/s and the cheapest within 5 % of it.
#pragma once
#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "common/unique_fd.h"
#include "common/output_file.h"

namespace lotus::cli {

struct SweepOptions {
    std::vector<std::string> cpus, memory; // as given: each value a configuration (empty: not varied)
    std::vector<std::pair<std::string, std::vector<std::string>>> params; // --param NAME=V1,V2: the job's own settings
    unsigned repeats = 1;                  // runs per configuration, interleaved (the table: median and spread)
    std::string html;                      // the table as an HTML page (samples/s per configuration as bars)
    std::vector<std::string> pass;         // options every run gets (rules, duration, resources interval)
    std::vector<std::string> command;
    std::string dir = "lotus-sweep";
    std::string summary_json; // the table as JSON
    double disk_reserve_pct = common::kDefaultDiskReserve; // --disk-reserve: the table's files (the runs': in pass)
};

// Returns 0 when every run went through (whatever its job's exit status), else the first failing run's status.
int run_sweep(const SweepOptions& opts);

// One configuration of a sweep: its name ("workers=2_cpus-1"), its values and its command with {NAME} replaced.
// The name is a file name in the output directory: a value's bytes other than letters, digits and . + - , : @ %
// are underscores in it ("../x" is "workers=.._x"), a name past 200 bytes is cut and hashed, and names that come
// out equal get -2, -3, ...
struct SweepConfig {
    std::string name, cpus, memory;
    std::vector<std::pair<std::string, std::string>> params;
    std::vector<std::string> command;
};
// Every configuration, the params' values crossed with the limits'. Throws std::invalid_argument where the
// command has a {NAME} that no --param names, or a --param the command never uses.
std::vector<SweepConfig> sweep_configs(const SweepOptions& opts);

// The best configuration (highest median samples/s) and the cheapest within 5 % of it (fewest CPUs: the --cpus
// limit, else the CPUs the job used on average; then least peak memory), as indices into the rows' figures;
// -1 where none has figures.
struct SweepCost {
    double samples_per_s = -1; // median over its repeats; -1: none went through
    double cpus = -1;          // its --cpus limit, else average CPUs used; -1 unknown
    double memory_mb = -1;     // peak memory; -1 unknown
};
std::pair<int, int> best_and_cheapest(const std::vector<SweepCost>& rows);

// The output directory, opened (O_NOFOLLOW): made now and marked with kSweepMark, or made by an earlier sweep (it
// holds the mark) and owned by `me`. Throws std::runtime_error with one line for anything else: a symbolic link,
// a file, another user's directory, a directory the sweep did not make.
inline constexpr const char* kSweepMark = ".lotus-sweep";
common::UniqueFd open_sweep_dir(const std::string& dir, uid_t me);
// A run's file in that directory, opened O_NOFOLLOW and emptied for writing: throws std::runtime_error with one
// line (naming it) where it is a symbolic link, not a regular file, a hard link, or another user's.
common::UniqueFd open_run_file(int dir_fd, const std::string& name, uid_t me);

} // namespace lotus::cli
