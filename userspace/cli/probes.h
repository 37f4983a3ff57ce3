// `lotus-bpf probes (--pid PID | PYTHON)`: where lotus-bpf would probe that interpreter (as `bpftrace -l` lists
// probe points): its file, version and layout source, the type-slot functions' and the evaluator's file offsets.
#pragma once
#include <optional>
#include <string>

namespace lotus::cli {

// Prints them; returns the exit status (1 with one line on stderr when it is no interpreter lotus-bpf knows).
int run_probes(std::optional<int> pid, const std::string& python);

} // namespace lotus::cli
